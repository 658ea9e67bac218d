#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# test_manpages.py: the manual pages in deploy/man/ format without warnings (groff -ww, and
# mandoc -T lint when installed), have the usual sections, and can't go stale: every option in
# each program's option table (printed by the hidden --help-options) and every long option its
# --help mentions has an entry in its page's OPTIONS, and every option the page lists is in the
# table. Every long option is also accepted as --a_b. Also: --version prints "<name> <version>"
# and exits 0.
# Usage: test_manpages.py VERSION (meson passes the project version).

import os
import re
import shutil
import subprocess
import sys
import unittest

SRC = os.environ.get("RDZV_SOURCE_ROOT",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MAN = os.path.join(SRC, "deploy", "man")
VERSION = None  # from argv

# page -> environment variable naming the built binary (None: not built in this tree yet)
PAGES = {
    "rdzvd.8": "RDZVD",
    "rdzvctl.1": "RDZVCTL",
    "rdzv-agent.1": "RDZV_AGENT",
    "rdzv-train.1": "RDZV_TRAIN",
}
SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS",
            "SEE ALSO"]
LONG_OPT = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def read_page(name):
    with open(os.path.join(MAN, name), encoding="utf-8") as f:
        return f.read()


def plain(roff):
    """Roff source with the escapes that matter for option names undone."""
    return roff.replace("\\-", "-").replace("\\%", "").replace("\\&", "")


def sections(roff):
    """{section name: its source lines} of a page."""
    out, cur = {}, None
    for line in roff.splitlines():
        m = re.match(r'\.SH\s+"?([^"]+)"?\s*$', line)
        if m:
            cur = m.group(1).strip()
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def option_tags(roff):
    """Long options named in the tags (.TP next lines) of the OPTIONS section."""
    lines = sections(roff).get("OPTIONS", [])
    opts = set()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == ".TP":
            opts.update(LONG_OPT.findall(plain(lines[i + 1])))
    return opts


def binary(env):
    path = os.environ.get(env)
    if not path and env == "RDZV_TRAIN":
        cand = os.path.join(os.environ.get("RDZV_BUILD_ROOT", ""), "train", "rdzv-train")
        path = cand if os.access(cand, os.X_OK) else None
    return path


def run(argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30)


class Format(unittest.TestCase):
    def test_groff_no_warnings(self):
        if not shutil.which("groff"):
            if not shutil.which("man"):
                self.skipTest("neither groff nor man is installed")
            for page in PAGES:
                with self.subTest(page=page):
                    r = run(["man", "--warnings=all", "-l", "-Tutf8", os.path.join(MAN, page)])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(r.stderr, "")
            return
        for page in PAGES:
            with self.subTest(page=page):
                r = run(["groff", "-man", "-Tutf8", "-ww", "-z", os.path.join(MAN, page)])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "", "groff warnings in %s" % page)

    def test_mandoc_lint(self):
        if not shutil.which("mandoc"):
            self.skipTest("mandoc is not installed")
        for page in PAGES:
            with self.subTest(page=page):
                r = run(["mandoc", "-T", "lint", "-W", "warning", os.path.join(MAN, page)])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(r.stdout + r.stderr, "")

    def test_sections(self):
        for page in PAGES:
            with self.subTest(page=page):
                roff = read_page(page)
                name, sect = page.rsplit(".", 1)
                m = re.search(r"^\.TH\s+(\S+)\s+(\S+)", roff, re.M)
                self.assertTrue(m, "no .TH line")
                self.assertEqual((m.group(1), m.group(2)), (name.upper(), sect))
                have = sections(roff)
                for s in SECTIONS:
                    self.assertIn(s, have, "%s has no %s section" % (page, s))
                self.assertTrue("FILES" in have or "EXAMPLES" in have)
                self.assertIn(plain(name), plain("\n".join(have["NAME"])))

    def test_examples_cover_schedulers(self):
        for page in ("rdzvd.8", "rdzv-agent.1", "rdzv-train.1"):
            with self.subTest(page=page):
                text = plain("\n".join(sections(read_page(page)).get("EXAMPLES", [])))
                for what in ("Slurm", "PBS", "bare"):
                    self.assertIn(what.lower(), text.lower())


class Options(unittest.TestCase):
    def help_opts(self, exe):
        r = run([exe, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        opts = set(LONG_OPT.findall(r.stdout))
        self.assertGreater(len(opts), 2, "no long options found in %s --help" % exe)
        return opts

    def test_help_options_in_page(self):
        checked = 0
        for page, env in PAGES.items():
            exe = binary(env)
            if not exe:
                print("note: %s not built here; %s checked for format only" % (env, page))
                continue
            with self.subTest(page=page):
                roff = read_page(page)
                helped = self.help_opts(exe)
                text = plain(roff)
                missing = [o for o in sorted(helped)
                           if not re.search(r"(?<![\w-])--%s(?![\w-])" % re.escape(o), text)]
                self.assertEqual(missing, [], "%s --help options missing from %s" % (exe, page))
                tagged = option_tags(roff)
                self.assertEqual(sorted(helped - tagged), [],
                                 "--help options without an OPTIONS entry in %s" % page)
                stale = sorted(tagged - helped)
                self.assertEqual(stale, [], "%s documents options %s lacks" % (page, exe))
                checked += 1
        self.assertGreaterEqual(checked, 3)

    def test_option_table_matches_page(self):
        """Each program prints its option table with the hidden --help-options: every option
        (and alias) in the table has an OPTIONS entry in its page, and every option the page's
        OPTIONS tags name is in the table (or is a command's, named in --help's usage)."""
        checked = 0
        for page, env in PAGES.items():
            exe = binary(env)
            if not exe:
                continue
            with self.subTest(page=page):
                r = run([exe, "--help-options"])
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.split()
                self.assertTrue(lines and all(l.startswith("--") for l in lines), r.stdout)
                table = {l[2:] for l in lines}
                tagged = option_tags(read_page(page))
                self.assertEqual(sorted(table - tagged), [],
                                 "%s options without an OPTIONS entry in %s" % (exe, page))
                # A command's own options (rdzvctl status --json) are not in the table; its
                # usage in --help names them.
                commands = self.help_opts(exe) - table
                self.assertEqual(sorted(tagged - table - commands), [],
                                 "%s documents options %s does not have" % (page, exe))
                checked += 1
        self.assertGreaterEqual(checked, 3)

    def test_version(self):
        for page, env in PAGES.items():
            exe = binary(env)
            if not exe:
                continue
            name = page.rsplit(".", 1)[0]
            for flag in ("--version", "-V") if env != "RDZV_TRAIN" else ("--version",):
                with self.subTest(binary=name, flag=flag):
                    r = run([exe, flag])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    # rdzv-train adds the backends it was built with: "(backends: gloo nccl)".
                    first = r.stdout if env != "RDZV_TRAIN" else r.stdout.split(" (")[0] + "\n"
                    self.assertEqual(first, "%s %s\n" % (name, VERSION))


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("RDZV", "PET_", "SLURM_", "PBS_", "OMPI_"))}


class Spelling(unittest.TestCase):
    """torchrun's spelling: every long option with a '-' between words also as '_'."""

    def test_underscore_spelling(self):
        checked = 0
        for page, env in PAGES.items():
            exe = binary(env)
            if not exe:
                continue
            r = run([exe, "--help"])
            opts = sorted(o for o in set(LONG_OPT.findall(r.stdout)) if "-" in o)
            self.assertTrue(opts, "%s --help lists no option with a '-'" % exe)
            for opt in opts:
                for spelling in (opt, opt.replace("-", "_")):
                    with self.subTest(exe=exe, option=spelling):
                        # '=@' then --help: a flag refuses a value, a bad value is refused
                        # and a good one leads to --help; none is an unknown option, and
                        # nothing starts.
                        p = subprocess.run([exe, "--%s=@" % spelling, "--help"],
                                           env=clean_env(), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, timeout=30)
                        self.assertNotIn("unknown option", p.stderr)
                        self.assertNotIn("unrecognized option", p.stderr)
                        self.assertIn("--" + opt.split("-")[0], p.stdout + p.stderr)
                        checked += 1
        self.assertGreater(checked, 20)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_manpages.py VERSION", file=sys.stderr)
        sys.exit(2)
    VERSION = sys.argv.pop(1)
    unittest.main(verbosity=2)
