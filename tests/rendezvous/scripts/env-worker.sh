#!/bin/sh
# Records the worker's environment as $RDZV_TEST_OUT/env.$RANK (atomically).
env > "$RDZV_TEST_OUT/env.$RANK.tmp" && mv "$RDZV_TEST_OUT/env.$RANK.tmp" "$RDZV_TEST_OUT/env.$RANK"
