/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-util.h: small helpers: time, number parsing, hashing, host:port parsing, random bytes,
 * hex, little-endian integers. Plain functions: no state, any thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Monotonic clock in milliseconds / nanoseconds. */
uint64_t rdzv_now_ms(void);
uint64_t rdzv_now_ns(void);
/* The wall clock (CLOCK_REALTIME) in unix seconds: for times shown to people. */
double rdzv_wall_s(void);

/* Parse a whole decimal unsigned number. Returns 0, -EINVAL (not a number) or -ERANGE. */
int rdzv_parse_u64(const char *s, uint64_t *ret);
/* Like rdzv_parse_u64 but accepts a K/M/G/KiB/MiB/GiB suffix (powers of 1024). */
int rdzv_parse_size(const char *s, uint64_t *ret);
/* Parse a decimal int64 held in n bytes (no NUL needed), as PyTorch's ADD stores it.
 * Accepts an optional sign, digits only. Returns 0, -EINVAL or -ERANGE. */
int rdzv_parse_i64n(const uint8_t *p, size_t n, int64_t *ret);
/* Parse a TCP port 0..65535. Returns 0 or -EINVAL. */
int rdzv_parse_port(const char *s, uint16_t *ret);
/* Split "host:port", "[v6]:port", "host", "[v6]" or a bare IPv6 address (several ':' and no
 * brackets: no port) into the host, without brackets, copied into hostbuf (it may be empty), and
 * *portstr: the text after the port's ':' ("" for "host:"), or NULL when there is no port.
 * Returns 0, or -EINVAL (an unclosed '[', text after ']' other than ":...", no room). The one
 * place HOST:PORT is taken apart: callers check the host and the port as they need. */
int rdzv_split_hostport(const char *s, char *hostbuf, size_t hostlen, const char **portstr);
/* rdzv_split_hostport with a non-empty host and, when there is one, a port 0..65535 into *port
 * (left as the default otherwise). Returns 0 or -EINVAL. */
int rdzv_parse_hostport(const char *s, char *hostbuf, size_t hostlen, uint16_t *port);
/* The reverse: "host:port", or "[host]:port" for an IPv6 literal (a host holding ':'), into out
 * (len > 0). Returns the length, or -ENOSPC when it did not fit (out then holds what did). */
int rdzv_format_hostport(char *out, size_t len, const char *host, unsigned port);

/* "s" unless n is 1, for a count in a message: "%u worker%s", n, rdzv_plural(n). */
static inline const char *rdzv_plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

/* A replica of a replicated rdzvd serves its clients on a port P of 1..RDZV_REPLICA_PORT_MAX and
 * its Raft link on rdzv_raft_port(P): the one place that relation is written. */
#define RDZV_REPLICA_PORT_MAX 65534
static inline unsigned rdzv_raft_port(unsigned port)
{
    return port + 1;
}

/* The environment variable for a long option: "PREFIX_" + the name upper-cased, '-' -> '_'. */
void rdzv_env_name(const char *prefix, const char *opt, char *buf, size_t len);

/* 64-bit keyed hash of n bytes (wyhash-style mixing; not cryptographic). */
uint64_t rdzv_hash64(uint64_t seed, const void *p, size_t n);

/* Seed from the kernel's random pool without blocking; falls back to time and pid. */
uint64_t rdzv_random_u64(void);
/* n random bytes from the kernel's CSPRNG (getrandom; blocks only before the pool is
 * initialised, early at boot), for nonces and tokens. Returns 0 or -EIO. */
int rdzv_random_bytes(uint8_t *out, size_t n);
/* Whether s holds a control character (below 0x20, or 0x7f). */
bool rdzv_has_ctl(const char *s);

/* Cut an incomplete UTF-8 sequence off the end of s (left there by a byte-wise truncation such
 * as snprintf's), so that JSON encoders accept it. Returns s. */
char *rdzv_utf8_trim(char *s);
/* src into dst (len bytes, len >= 8): whole when it fits, else cut after its last whole word
 * that leaves room for " ..." (mid-word only when one word fills dst), never inside a UTF-8
 * sequence. Returns dst. */
char *rdzv_cut_words(char *dst, size_t len, const char *src);

/* The first executable file called name in $PATH, written to buf. 0, -ENOENT, or -ENAMETOOLONG. */
int rdzv_find_in_path(const char *name, char *buf, size_t len);
/* A signal's name as users write it ("SIGTERM"), never its description ("Terminated"): a static
 * string for the signals a job meets, else "signal N" in buf (n >= 16) and buf. */
const char *rdzv_signal_name(int sig, char *buf, size_t n);
/* Delete directory dir and everything in it (symbolic links are deleted, not followed), as
 * rm -rf. 0 (also when dir does not exist), or the first error as a negative errno (what could
 * be deleted is). */
int rdzv_rmtree(const char *dir);
/* Whether the connected socket fd is connected to itself: its local address (port included) is
 * its peer's. A connect() to a port of this host that nothing listens on, inside the kernel's
 * ephemeral range, may get that very port as its source (a TCP self-connect): what it sends, it
 * reads back. False too when it cannot tell. */
bool rdzv_fd_self_connected(int fd);

/* Lower-case hex of n bytes into out (2n+1 bytes with the NUL). */
void rdzv_hex(const uint8_t *p, size_t n, char *out);
/* Exactly 2n hex digits (either case) in s -> out[0..n). Returns 0 or -EINVAL. */
int rdzv_hex_decode(const char *s, uint8_t *out, size_t n);

/* Little-endian integers in byte buffers (the TCPStore wire, frames, journal, checkpoints). */
static inline uint32_t rdzv_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t rdzv_get_u64(const uint8_t *p)
{
    return (uint64_t)rdzv_get_u32(p) | (uint64_t)rdzv_get_u32(p + 4) << 32;
}
static inline void rdzv_set_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void rdzv_set_u64(uint8_t *p, uint64_t v)
{
    rdzv_set_u32(p, (uint32_t)v);
    rdzv_set_u32(p + 4, (uint32_t)(v >> 32));
}
