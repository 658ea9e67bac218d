/* SPDX-License-Identifier: Apache-2.0 */
/* fake-clock.c: the injected clock (fake-clock.h). It defines clock_gettime() in the test
 * executable, which the dynamic linker binds ahead of libc's for the executable and for libuv
 * (interposition): the monotonic clocks answer the injected time, CLOCK_REALTIME the real time
 * when the test first asked plus as much as the injected clock moved since (wall times, as the
 * failure windows a job record keeps use, move with it), the others go to the kernel. */
#include "fake-clock.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

#define START_NS (1000 * NS_PER_S) /* not 0: nothing may take 0 for "never" */

static uint64_t now_ns = START_NS;
static uint64_t wall_base_ns; /* CLOCK_REALTIME at the first call */

int clock_gettime(clockid_t id, struct timespec *ts)
{
    switch (id) {
    case CLOCK_MONOTONIC:
    case CLOCK_MONOTONIC_COARSE:
    case CLOCK_MONOTONIC_RAW:
    case CLOCK_BOOTTIME:
        ts->tv_sec = (time_t)(now_ns / NS_PER_S);
        ts->tv_nsec = (long)(now_ns % NS_PER_S);
        return 0;
    case CLOCK_REALTIME:
    case CLOCK_REALTIME_COARSE:
        if (!wall_base_ns) {
            struct timespec real;

            if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &real) < 0)
                return -1;
            wall_base_ns = (uint64_t)real.tv_sec * NS_PER_S + (uint64_t)real.tv_nsec;
        }
        ts->tv_sec = (time_t)((wall_base_ns + now_ns - START_NS) / NS_PER_S);
        ts->tv_nsec = (long)((wall_base_ns + now_ns - START_NS) % NS_PER_S);
        return 0;
    default:
        return (int)syscall(SYS_clock_gettime, id, ts);
    }
}

uint64_t fake_clock_ms(void)
{
    return now_ns / NS_PER_MS;
}

void fake_clock_advance(uint64_t ms)
{
    now_ns += ms * NS_PER_MS;
}
