/* SPDX-License-Identifier: Apache-2.0 */
/* fail-pipe.c: an LD_PRELOAD shim for tests: the Nth pipe2() of the process (N from
 * $RDZV_FAIL_PIPE_AT, counted from 1) fails with EMFILE, as when the process is out of file
 * descriptors; every other call goes to libc. Single-threaded callers only (rdzv-agent's
 * start-up). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int pipe2(int fds[2], int flags);

int pipe2(int fds[2], int flags)
{
    static int (*real)(int *, int);
    static int calls;
    const char *at = getenv("RDZV_FAIL_PIPE_AT");

    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pipe2");
    if (at && ++calls == atoi(at)) {
        errno = EMFILE;
        return -1;
    }
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fds, flags);
}
