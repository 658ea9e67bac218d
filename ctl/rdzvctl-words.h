/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl-words.h: rdzvctl's commands and status's options by name, and the one line a word
 * that names none gets, with the nearest one ("did you mean status?"). */
#pragma once
#include <stdbool.h>

/* Whether word is one of rdzvctl's commands; when not, says so on stderr: "rdzvctl: unknown
 * command 'stauts'; did you mean status? (see rdzvctl --help)", the nearest as an unknown
 * option's (rdzv_opt_nearest), or without it when none is that near. */
bool rdzvctl_command_known(const char *word);

/* Says on stderr that status does not take word: "rdzvctl: status: unknown option '--jsno'; did
 * you mean --json? (see rdzvctl --help)", or what status takes when no option is that near. */
void rdzvctl_status_option_unknown(const char *word);
