/* SPDX-License-Identifier: Apache-2.0 */
/* train-plot.h: a PNG line chart of the loss curve (libpng). */
#pragma once
#include <stddef.h>

/* Plot y against x (n points, n >= 1) with axes, ticks and the min/max values labelled, to
 * path. Returns 0 or a negative errno. */
int train_plot_png(const char *path, const double *x, const double *y, size_t n);
