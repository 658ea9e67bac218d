# SPDX-License-Identifier: Apache-2.0
"""test_install_prefix.py: `meson install` with --prefix keeps every file under
the prefix (rdzvd.service in PREFIX/lib/systemd/system, which systemd reads for /usr/local too),
unless -Dsystemdunitdir names the unit's directory. Reads `meson introspect --installed` of a
fresh configuration of this source tree (nothing is built or installed)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("RDZV_SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")


def installed(prefix, *options):
    """{source file: destination} of a configuration of SOURCE with prefix and options."""
    build = tempfile.mkdtemp(prefix="rdzv-prefix-build-")
    try:
        r = subprocess.run(["meson", "setup", build, SOURCE, "--prefix", prefix, "-Dtests=false",
                            "-Dtrainer=disabled", *options],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError("meson setup failed:\n" + (r.stdout + r.stderr)[-3000:])
        r = subprocess.run(["meson", "introspect", build, "--installed"], capture_output=True,
                           text=True, timeout=120, check=True)
        return json.loads(r.stdout)
    finally:
        shutil.rmtree(build, ignore_errors=True)


class InstallPrefix(unittest.TestCase):
    def test_every_file_under_the_prefix(self):
        prefix = tempfile.mkdtemp(prefix="rdzv-prefix-")
        try:
            dests = installed(prefix)
        finally:
            shutil.rmtree(prefix, ignore_errors=True)
        self.assertTrue(any(d.endswith("/rdzvd") for d in dests.values()), dests)
        outside = sorted(d for d in dests.values() if not d.startswith(prefix + "/"))
        self.assertEqual(outside, [], "installed outside --prefix %s" % prefix)
        self.assertIn(os.path.join(prefix, "lib/systemd/system/rdzvd.service"), dests.values())

    def test_unit_directory_when_asked(self):
        prefix = tempfile.mkdtemp(prefix="rdzv-prefix-")
        try:
            dests = installed(prefix, "-Dsystemdunitdir=/etc/systemd/system")
        finally:
            shutil.rmtree(prefix, ignore_errors=True)
        self.assertIn("/etc/systemd/system/rdzvd.service", dests.values())
        outside = sorted(d for d in dests.values() if not d.startswith(prefix + "/"))
        self.assertEqual(outside, ["/etc/systemd/system/rdzvd.service"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
