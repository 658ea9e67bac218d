/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-gpu.c: GPU discovery (agent-gpu.h) from CUDA_VISIBLE_DEVICES or a stand-in for the
 * driver's directory, and the GPUs' UUIDs from RDZV_GPU_UUIDS, the driver's information files or
 * a stand-in for nvidia-smi (a shell script): no GPU needed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/group/agent-gpu.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
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

#define U0 "GPU-00000000-0000-0000-0000-000000000000"
#define U1 "GPU-11111111-1111-1111-1111-111111111111"
#define U2 "GPU-abcdef01-2222-2222-2222-222222222222"

/* ret as a comma-separated list. */
static const char *uuids_of(const struct rdzv_gpu_set *ret)
{
    static char out[RDZV_GPU_UUIDS_MAX * (RDZV_GPU_UUID_LEN + 1) + 1];
    char text[RDZV_GPU_UUID_LEN + 1];
    size_t off = 0;

    out[0] = '\0';
    for (unsigned i = 0; i < ret->n; i++) {
        rdzv_gpu_uuid_format(&ret->u[i], text);
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s", i ? "," : "", text);
    }
    return out;
}

static void write_file(const char *path, const char *text, int mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

    ASSERT_OK(fd);
    ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* RDZV_GPU_UUIDS: exactly those, whatever the node has; "" reports none; a malformed one is
 * refused, saying which. */
static void test_uuids_override(void)
{
    struct rdzv_gpu_set s;
    char err[256];
    const char *const vis[] = {"0"};

    ASSERT_OK(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.override = U1 "," U0,
                                                            .visible = vis, .nvisible = 1,
                                                            .nproc = 1,
                                                            .driver_dir = "/nonexistent"},
                              &s, err, sizeof(err)));
    ASSERT_EQ(strcmp(uuids_of(&s), U1 "," U0), 0);
    ASSERT_OK(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.override = "", .nproc = 1},
                              &s, err, sizeof(err)));
    ASSERT_EQ(s.n, 0);
    ASSERT_EQ(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.override = U1 ",GPU-xyz",
                                                            .nproc = 1},
                              &s, err, sizeof(err)),
              -EINVAL);
    ASSERT_TRUE(strstr(err, "'GPU-xyz', is not a GPU UUID") != NULL);
}

/* The driver's information files, in PCI order: the first nproc visible GPUs; with
 * CUDA_VISIBLE_DEVICES, its indexes looked up there, its UUIDs (or a unique prefix) as given;
 * what cannot be named (a MIG device, an index past the list, a malformed line) left out. */
static void test_uuids_from_driver(void)
{
    const char *tmp = getenv("TMPDIR");
    static const char *const lines[] = {"GPU UUID:\t " U0, "GPU UUID: " U1, "GPU UUID: junk",
                                        "GPU UUID: " U2};
    char dir[512], path[700], text[256], err[256];
    struct rdzv_gpu_set s;
    char **list = NULL;
    int n;

    snprintf(dir, sizeof(dir), "%s/test-agent-gpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    for (int i = 3; i >= 0; i--) { /* made out of order: read in PCI order */
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0", dir, i + 0x17);
        ASSERT_OK(mkdir(path, 0755));
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0/information", dir, i + 0x17);
        snprintf(text, sizeof(text), "Model: \t A100\nIRQ: 1\n%s\nBus Location: x\n", lines[i]);
        write_file(path, text, 0644);
    }
    n = agent_gpu_list(NULL, dir, &list);
    ASSERT_EQ(n, 4);
    ASSERT_OK(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.visible = (const char *const *)list,
                                                            .nvisible = n, .nproc = 8,
                                                            .driver_dir = dir},
                              &s, err, sizeof(err)));
    ASSERT_EQ(strcmp(uuids_of(&s), U0 "," U1 "," U2), 0); /* GPU 2's line is junk */
    ASSERT_OK(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.visible = (const char *const *)list,
                                                            .nvisible = n, .nproc = 2,
                                                            .driver_dir = dir},
                              &s, err, sizeof(err)));
    ASSERT_EQ(strcmp(uuids_of(&s), U0 "," U1), 0);
    agent_gpu_list_free(list, n);
    n = agent_gpu_list("3,1,9,MIG-1234,GPU-abcdef01,GPU-77777777-7777-7777-7777-777777777777",
                       dir, &list);
    ASSERT_OK(agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.cvd = "x",
                                                            .visible = (const char *const *)list,
                                                            .nvisible = n, .nproc = 8,
                                                            .driver_dir = dir},
                              &s, err, sizeof(err)));
    ASSERT_EQ(strcmp(uuids_of(&s), U2 "," U1 ",GPU-77777777-7777-7777-7777-777777777777"), 0);
    agent_gpu_list_free(list, n);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0/information", dir, i + 0x17);
        ASSERT_OK(unlink(path));
        snprintf(path, sizeof(path), "%s/0000:%02x:00.0", dir, i + 0x17);
        ASSERT_OK(rmdir(path));
    }
    ASSERT_OK(rmdir(dir));
}

/* The UUIDs with no driver directory, from smi. */
static int from_smi(const char *smi, struct rdzv_gpu_set *s)
{
    char err[256];

    return agent_gpu_uuids(&(struct agent_gpu_uuids_cfg){.nproc = 8,
                                                         .driver_dir = "/nonexistent",
                                                         .smi = smi},
                           s, err, sizeof(err));
}

/* No driver directory: nvidia-smi's lines (a stand-in script), bounded in time and output. */
static void test_uuids_from_smi(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512], smi[600];
    struct rdzv_gpu_set s;
    uint64_t t0;

    snprintf(dir, sizeof(dir), "%s/test-agent-smi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    snprintf(smi, sizeof(smi), "%s/nvidia-smi", dir);
    write_file(smi, "#!/bin/sh\n[ \"$*\" = '--query-gpu=uuid --format=csv,noheader' ] || exit 9\n"
               "printf '" U1 "\\n" U0 "\\n'\n", 0755);
    ASSERT_OK(from_smi(smi, &s));
    ASSERT_EQ(strcmp(uuids_of(&s), U1 "," U0), 0);
    /* It fails, or floods: none. */
    write_file(smi, "#!/bin/sh\necho " U1 "; exit 3\n", 0755);
    ASSERT_OK(from_smi(smi, &s));
    ASSERT_EQ(s.n, 0);
    write_file(smi, "#!/bin/sh\nwhile :; do echo " U1 "; done\n", 0755);
    ASSERT_OK(from_smi(smi, &s));
    ASSERT_EQ(s.n, 0);
    /* It hangs: given up on after AGENT_GPU_SMI_TIMEOUT_MS, none. */
    write_file(smi, "#!/bin/sh\nexec sleep 60\n", 0755);
    t0 = rdzv_now_ms();
    ASSERT_OK(from_smi(smi, &s));
    ASSERT_EQ(s.n, 0);
    ASSERT_TRUE(rdzv_now_ms() - t0 < AGENT_GPU_SMI_TIMEOUT_MS + 3000);
    ASSERT_OK(unlink(smi));
    ASSERT_OK(rmdir(dir));
    /* Not installed: none, quietly. */
    ASSERT_OK(from_smi(smi, &s));
    ASSERT_EQ(s.n, 0);
}

int main(void)
{
    rdzv_log_setup("test-agent-gpu", RDZV_LOG_ERROR);
    TEST(test_cuda_visible_devices);
    TEST(test_driver_dir);
    TEST(test_uuids_override);
    TEST(test_uuids_from_driver);
    TEST(test_uuids_from_smi);
    return tap_done();
}
