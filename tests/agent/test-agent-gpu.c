/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-gpu.c: GPU discovery (agent-gpu.h) from CUDA_VISIBLE_DEVICES or a stand-in for the
 * driver's directory: no GPU needed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/group/agent-gpu.h"
#include "../tap.h"

static void assert_list(char **list, int n, const char *const *want, int nwant)
{
    ASSERT_EQ(n, nwant);
    for (int i = 0; i < n; i++) {
        ASSERT_NOT_NULL(list[i]);
        if (strcmp(list[i], want[i]) != 0)
            tap_fail(__FILE__, __LINE__, "entry %d: \"%s\", expected \"%s\"", i, list[i], want[i]);
    }
}

/* CUDA_VISIBLE_DEVICES wins over the driver, entries as given (indexes or UUIDs), empty ones
 * skipped. */
static void test_cuda_visible_devices(void)
{
    static const char *const two[] = {"0", "1"};
    static const char *const sparse[] = {"3", "GPU-8a1b", "5"};
    char **list = NULL;
    int n;

    n = agent_gpu_list("0,1", "/nonexistent", &list);
    assert_list(list, n, two, 2);
    agent_gpu_list_free(list, n);
    n = agent_gpu_list(",3,,GPU-8a1b,5,", "/nonexistent", &list);
    assert_list(list, n, sparse, 3);
    agent_gpu_list_free(list, n);
    /* Set but empty: no GPU, even if the driver has some. */
    n = agent_gpu_list("", "/", &list);
    ASSERT_EQ(n, 0);
    ASSERT_NULL(list);
    agent_gpu_list_free(list, n);
}

/* Without CUDA_VISIBLE_DEVICES: one index per entry of the driver's directory. */
static void test_driver_dir(void)
{
    static const char *const three[] = {"0", "1", "2"};
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    char **list = (char **)&list;
    int n, fd;

    snprintf(dir, sizeof(dir), "%s/test-agent-gpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    n = agent_gpu_list(NULL, dir, &list);
    ASSERT_EQ(n, 0);
    ASSERT_NULL(list);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0", dir, i + 0x17);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        ASSERT_OK(fd);
        close(fd);
    }
    n = agent_gpu_list(NULL, dir, &list);
    assert_list(list, n, three, 3);
    agent_gpu_list_free(list, n);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0", dir, i + 0x17);
        ASSERT_OK(unlink(path));
    }
    ASSERT_OK(rmdir(dir));
    /* No driver: no GPU. */
    n = agent_gpu_list(NULL, dir, &list);
    ASSERT_EQ(n, 0);
    ASSERT_NULL(list);
}

int main(void)
{
    TEST(test_cuda_visible_devices);
    TEST(test_driver_dir);
    return tap_done();
}
