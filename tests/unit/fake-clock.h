/* SPDX-License-Identifier: Apache-2.0 */
/* fake-clock.h: the injected clock of the job machine's unit tests (fake-clock.c). A test linked
 * with it sees CLOCK_MONOTONIC (and its COARSE, RAW and BOOTTIME kin) stand still until the test
 * moves it: libuv's timers and rdzv_now_ms() read it, so jobtest.h's run_ms(e, ms) runs exactly
 * the timers due in those ms, in order, at once, however loaded the machine is. Every other clock
 * (CLOCK_REALTIME: log lines, wall times) is the real one. One thread only. */
#pragma once
#include <stdint.h>

/* The injected monotonic clock, in ms (it starts at an arbitrary value, not 0). */
uint64_t fake_clock_ms(void);
/* Move it ms forward. */
void fake_clock_advance(uint64_t ms);
