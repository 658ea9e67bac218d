# SPDX-License-Identifier: Apache-2.0
"""Print where a pure Python module goes for this interpreter under install prefix argv[1], so
that the interpreter finds it: Debian's python3 reads /usr/lib/python3/dist-packages (prefix
/usr, the 'deb_system' scheme) and /usr/local/lib/python3.X/dist-packages (prefix /usr/local),
neither of which meson's default (lib/python3/dist-packages under any prefix) gets right for
/usr/local. Elsewhere: the standard posix_prefix scheme under the prefix."""
import os
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
schemes = sysconfig.get_scheme_names()
if "deb_system" in schemes:
    if prefix == "/usr":
        path = sysconfig.get_path("purelib", "deb_system", vars={"base": prefix})
    else:
        path = os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "dist-packages")
else:
    path = sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix})
print(path)
