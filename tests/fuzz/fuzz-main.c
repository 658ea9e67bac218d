/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-main.c: replay saved fuzzer inputs through LLVMFuzzerTestOneInput without libFuzzer, so the
 * corpus runs as an ordinary test with any compiler (the systemd fuzz-main idea). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Run one file. Returns 0 or a negative errno (the file could not be read). */
static int run_file(const char *path)
{
    struct stat st;
    uint8_t *buf;
    size_t n;
    FILE *f;

    f = fopen(path, "rb");
    if (!f)
        return -errno;
    if (fstat(fileno(f), &st) < 0) {
        int r = -errno;

        fclose(f);
        return r;
    }
    /* An exact-size copy, so sanitizers see reads past the end of the input. */
    n = (size_t)st.st_size;
    buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return -EIO;
    }
    fclose(f);
    (void)LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file in dir, in name order. Returns the count or a negative errno. */
static int run_dir(const char *dir)
{
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int count = 0, r = 0;
    DIR *d = opendir(dir);

    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof(*names));

            if (!nn) {
                r = -ENOMEM;
                goto out_free;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) {
            r = -ENOMEM;
            goto out_free;
        }
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        r = run_file(path);
        if (r < 0) {
            fprintf(stderr, "%s: %s\n", path, strerror(-r));
            goto out_free;
        }
        count++;
    }
    r = count;

out_free:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return r;
}

int main(int argc, char **argv)
{
    unsigned total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int r;

        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        r = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]);
        if (r < 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(-r));
            return 1;
        }
        total += S_ISDIR(st.st_mode) ? (unsigned)r : 1;
    }
    printf("%s: ran %u inputs\n", argv[0], total);
    /* An empty corpus is a broken test setup, not a pass. */
    return total > 0 ? 0 : 1;
}
