#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install, build, start rdzvd on a free port and run a real job against it: 4 PyTorch TCPStore
# clients (Debian's torch 1.13) meet at a store barrier and exchange a value, inspected with rdzvctl.
set -eu
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
./build/daemon/rdzvd --port 0 --port-file "$dir/port" -l warn & pid=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.05; done
ep=127.0.0.1:$(cat "$dir/port")
echo "rdzvd is listening on $ep"
for rank in 0 1 2 3; do
  /usr/bin/python3 - "$ep" "$rank" <<'PY' &
import sys, datetime, torch.distributed as dist
host, port = sys.argv[1].rsplit(":", 1); rank = int(sys.argv[2])
s = dist.TCPStore(host, int(port), 4, False, datetime.timedelta(seconds=30))  # ADDs init/ as workers do
s.set(f"hello/{rank}", f"rank {rank} was here")
if s.add("arrived", 1) == 4:
    s.set("go", "1")
s.wait(["go"])
print(f"rank {rank}: saw '{s.get(f'hello/{(rank + 1) % 4}').decode()}'")
PY
done
wait $(jobs -p | grep -v "^$pid$") 
echo "keys in the store (rdzvctl -e $ep list):"
./build/daemon/rdzvctl -e "$ep" list | sort | sed 's/^/  /'
echo "arrived = $(./build/daemon/rdzvctl -e "$ep" get arrived)"
