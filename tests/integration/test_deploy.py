#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_deploy.py: the files in deploy/ that can't be exercised here.
#   test_deploy.py unit       rdzvd.service has the hardening it promises, one way to its own user
#   test_deploy.py verify     `systemd-analyze verify` is clean (exit 77 without systemd-analyze)
#   test_deploy.py apptainer  rdzv.def has its header and sections, copies the tree, runs
#                             rdzv-agent, and builds with README.md's build commands (From source)
#   test_deploy.py store-net  the job templates' default --allow-store-from (store_net: the
#                             smallest network of a /8 or narrower that holds the job's hosts),
#                             the same function in each, against a getent that answers from a table

import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("RDZV_SOURCE_ROOT",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEPLOY = os.path.join(SRC, "deploy")
failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def read(*path):
    with open(os.path.join(*path), encoding="utf-8") as f:
        return f.read()


def unit_settings(text):
    """{(section, key): [values]} of a systemd unit file."""
    out, sect = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        m = re.match(r"\[(\w+)\]$", line)
        if m:
            sect = m.group(1)
            continue
        key, _, val = line.partition("=")
        out.setdefault((sect, key.strip()), []).append(val.strip())
    return out


REQUIRED = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes", "ProtectControlGroups": "yes",
    # AF_NETLINK: --peers reads this machine's addresses (getifaddrs uses a netlink socket).
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK", "RestrictNamespaces": "yes",
    "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
    "SystemCallFilter": "@system-service", "LimitNOFILE": "65536", "StateDirectory": "rdzvd",
    "Restart": "on-failure",
}


def test_unit():
    s = unit_settings(read(DEPLOY, "rdzvd.service"))
    for key, want in REQUIRED.items():
        check(want in s.get(("Service", key), []), "rdzvd.service: %s=%s" % (key, want))
    check(any(v.endswith("/rdzvd") for v in s.get(("Service", "ExecStart"), [])),
          "rdzvd.service: ExecStart runs rdzvd")
    dynamic = s.get(("Service", "DynamicUser"), []) == ["yes"]
    sysusers = os.path.exists(os.path.join(DEPLOY, "rdzv.sysusers"))
    user = s.get(("Service", "User"), [])
    check(dynamic != sysusers, "rdzvd.service: exactly one of DynamicUser=yes, rdzv.sysusers")
    if sysusers:
        check(user == ["rdzv"], "rdzvd.service: User=rdzv with rdzv.sysusers")
    check(("Install", "WantedBy") in s, "rdzvd.service: has an [Install] target")


def test_verify():
    sa = shutil.which("systemd-analyze")
    if not sa:
        print("SKIP: systemd-analyze is not installed", file=sys.stderr)
        sys.exit(77)
    rdzvd = os.environ.get("RDZVD")
    check(bool(rdzvd) and os.access(rdzvd, os.X_OK), "built rdzvd found ($RDZVD)")
    # verify wants the ExecStart binary to exist: point it at the built one. --man=no: the page
    # of Documentation= is not installed here (test_manpages.py checks it).
    text = re.sub(r"^ExecStart=\S+", "ExecStart=" + os.path.abspath(rdzvd or "/bin/false"),
                  read(DEPLOY, "rdzvd.service"), flags=re.M)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rdzvd.service")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([sa, "verify", "--man=no", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60, cwd=d)
        print(r.stdout, end="")
        check(r.returncode == 0 and r.stdout.strip() == "", "systemd-analyze verify is clean")


def def_parse(text):
    """(header {key: value}, {section: [body lines]}) of an Apptainer definition file."""
    header, sects, cur = {}, {}, None
    for line in text.splitlines():
        m = re.match(r"%(\w+)\b", line)
        if m:
            cur = m.group(1)
            sects[cur] = []
            continue
        if cur:
            sects[cur].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            key, _, val = line.partition(":")
            header[key.strip()] = val.strip()
    return header, sects


def shell_lines(lines):
    """Commands of a shell section, continuation lines joined, comments dropped."""
    out, acc = [], ""
    for line in lines:
        s = line.strip()
        if not acc and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            acc += s[:-1].strip() + " "
            continue
        out.append(" ".join((acc + s).split()))
        acc = ""
    return out


def readme_build_commands():
    """The meson/ninja lines of README.md's "From source" block (Install)."""
    text = read(SRC, "README.md")
    m = re.search(r"^\*\*From source\.?\*\*.*?^```sh\n(.*?)^```", text, re.M | re.S)
    if not m:
        return []
    return [" ".join(line.split()) for line in m.group(1).splitlines()
            if re.match(r"(meson|ninja) ", line)]


def test_apptainer():
    header, sects = def_parse(read(DEPLOY, "rdzv.def"))
    check(header.get("Bootstrap") == "docker", "rdzv.def: Bootstrap: docker")
    check(bool(re.match(r"(debian:12|nvidia/cuda:)", header.get("From", ""))),
          "rdzv.def: From: debian:12 or an nvidia/cuda image")
    for s in ("files", "post", "runscript"):
        check(s in sects and shell_lines(sects[s]), "rdzv.def: has a non-empty %" + s)
    files = [line.split() for line in shell_lines(sects.get("files", []))]
    dest = [f[1] for f in files if len(f) == 2 and f[0] == "."]
    check(len(dest) == 1, "rdzv.def: %files copies the source tree (. DEST)")
    run = shell_lines(sects.get("runscript", []))
    check(any(re.fullmatch(r'(exec )?rdzv-agent "\$@"', c) for c in run),
          'rdzv.def: %runscript runs rdzv-agent "$@"')
    post = shell_lines(sects.get("post", []))
    check(bool(dest) and ("cd " + dest[0]) in post, "rdzv.def: %post builds in the copied tree")
    readme = readme_build_commands()
    check(len(readme) >= 3, "README.md: 'From source' has the build commands")
    built = [c for c in post if re.match(r"(meson|ninja) ", c)]
    check(built == readme, "rdzv.def: %%post build commands %s == README.md's %s"
          % (built, readme))
    # The packages of tests/install-deps.sh that the build needs (not its test-only ones).
    m = re.search(r"^pkgs=\(([^)]*)\)", read(SRC, "tests", "install-deps.sh"), re.M)
    test_only = {"python3-torch", "procps", "openmpi-bin", "chromium", "gcovr", "iproute2", "gdb",
                 "strace", "debootstrap", "python3-mesonpy", "python3-venv", "python3-pip",
                 "curl", "gridengine-master", "gridengine-exec", "gridengine-client"}
    need = set(m.group(1).split()) - test_only if m else set()
    apt = set()
    for c in post:
        if c.startswith("apt-get install"):
            apt.update(w for w in c.split()[2:] if not w.startswith("-"))
    check(bool(need) and need <= apt, "rdzv.def: %%post installs %s" % sorted(need))


L = "127.0.0.0/8,::1"
OWN = ",10.1.2.3/32"  # this host's (hostname -I: 10.1.2.3, a link-local IPv6 left out)
STORE_NET_CASES = [  # (hosts, what store_net prints, or None when it fails)
    (["a"], L + OWN),                                     # the first host: itself
    (["lo", "b"], L + OWN + ",10.1.2.4/32"),              # its name resolves to 127.0.1.1 here
    (["a", "c", "b"], L + OWN + ",10.1.2.4/32,10.1.3.200/32"),  # each one, once
    (["a", "other"], L + OWN + ",192.168.1.1/32"),
    (["10.9.8.7", "b"], L + OWN + ",10.1.2.4/32,10.9.8.7/32"),  # addresses, as Slurm's NodeAddr
    (["a", "nowhere"], None),                             # a name that does not resolve
    (["n%d" % i for i in range(59)], L + OWN + "".join(",10.2.0.%d/32" % i for i in range(59))),
    # past 60: the smallest network that holds them, and this host
    (["n%d" % i for i in range(60)], L + ",10.2.0.0/26" + OWN),
    (["n%d" % i for i in range(61)] + ["far"], L + ",10.0.0.0/8" + OWN),   # 10.254.0.1: a /8
    (["n%d" % i for i in range(61)] + ["other"], None),    # 192.168.x: wider than a /8
    (["hi%d" % i for i in range(61)], L + ",200.0.0.0/8" + OWN),  # the top bit set
]
GETENT = {"a": "10.1.2.3", "b": "10.1.2.4", "c": "10.1.3.200", "far": "10.254.0.1",
          "other": "192.168.1.1", "lo": "127.0.1.1",
          **{"n%d" % i: "10.2.0.%d" % i for i in range(61)},
          **{"hi%d" % i: "200.%d.0.1" % (i * 4) for i in range(61)}}


def test_store_net():
    tmp = tempfile.mkdtemp(prefix="rdzv-store-net-")
    try:
        getent = os.path.join(tmp, "getent")
        with open(getent, "w") as f:
            f.write("#!/bin/sh\n# getent ahostsv4 NAME, from a table (an address answers itself)\n"
                    "case $2 in\n")
            for name, addr in GETENT.items():
                f.write("%s) a=%s ;;\n" % (name, addr))
            f.write("[0-9]*) a=$2 ;;\n*) exit 2 ;;\nesac\n"
                    'echo "$a      STREAM $2"\necho "$a      DGRAM"\n')
        os.chmod(getent, 0o755)
        hostname = os.path.join(tmp, "hostname")
        with open(hostname, "w") as f:
            f.write('#!/bin/sh\n[ "$1" = -I ] && echo "10.1.2.3 127.0.0.2 fe80::1"\n')
        os.chmod(hostname, 0o755)
        bodies = {}
        for t in ("rdzv.sbatch", "rdzv.pbs", "rdzv.sge"):
            m = re.search(r"^store_net\(\) \{.*?^\}\n", read(DEPLOY, t), re.M | re.S)
            check(m is not None, "%s defines store_net" % t)
            if m:
                bodies[t] = m.group(0)
        check(len(set(bodies.values())) == 1, "the templates' store_net are one function")
        for t, body in bodies.items():
            for hosts, want in STORE_NET_CASES:
                r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + body +
                                    'if net=$(store_net "$@"); then echo "$net"; '
                                    'else echo FAIL; fi', "bash", *hosts],
                                   env=dict(os.environ, PATH=tmp + ":" + os.environ["PATH"]),
                                   capture_output=True, text=True, timeout=30)
                got = r.stdout.strip()
                # loopback first, then each entry once, in any order
                same = got == want if not want or got == "FAIL" else (
                    got.split(",")[:2] == want.split(",")[:2] and
                    sorted(got.split(",")) == sorted(want.split(",")))
                check(r.returncode == 0 and (same or (want is None and got == "FAIL")),
                      "%s: store_net %s = %s (want %s) %s" % (t, " ".join(hosts), got,
                                                              want or "FAIL", r.stderr.strip()))
    finally:
        shutil.rmtree(tmp, True)


def main():
    modes = {"unit": test_unit, "verify": test_verify, "apptainer": test_apptainer,
             "store-net": test_store_net}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        print("usage: test_deploy.py unit|verify|apptainer|store-net", file=sys.stderr)
        sys.exit(2)
    modes[sys.argv[1]]()
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
