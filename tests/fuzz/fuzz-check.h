/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-check.h: what every fuzz target shares: its entry point, and CHECK, never compiled out (a
 * fuzzer finding is an abort with the file and line). */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
