#!/usr/bin/env python3
"""Reads the logs scripts/test.sh writes and sums them into one verdict.

scripts/test.sh runs each step (format, lints, the workspace tests, the
Python wheel's tests, the temp-directory check) with its whole output in a
log file and its exit status in a file beside it, then calls

    verdict.py report cargo LOG     per test binary, one result line; the
                                    failing tests' output when any failed
    verdict.py report pytest LOG    pytest's result line; failures in full
    verdict.py final LOGDIR SECONDS the counts of every step and one last
                                    line: passed, failed, ignored, time, and
                                    which checks failed; exit status 1 if
                                    anything failed

scripts/test_verdict.py tests it on real cargo and pytest output.
"""

import os
import re
import sys

# What a binary's section starts with in `cargo test` output.
_RUNNING = re.compile(r"^\s+Running (\S+(?: \S+)?) \((\S+)\)\s*$")
_DOCTESTS = re.compile(r"^\s+Doc-tests (\S+)\s*$")
_RESULT = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;"
)
_IGNORED = re.compile(r"^test (.+) \.\.\. ignored(?:, (.*))?$")
# An ignored test's verdict that another test's stderr pushed onto a line of its own
# ("test NAME ... <stderr text>" then "ignored, REASON").
_IGNORED_ALONE = re.compile(r"^ignored(?:, (.*))?$")
_CAUSED = re.compile(r"process didn't exit successfully: .*\((.+)\)\s*$")

# How much of a failure's output is printed before pointing at the log.
MAX_BLOCK_LINES = 60


class Binary:
    """One test binary's part of a `cargo test` log."""

    def __init__(self, name):
        self.name = name
        self.lines = []
        self.result = None  # (passed, failed, ignored) once its result line is seen
        self.ignored_reasons = []
        self.crash = None  # why it ended without a result line

    @property
    def passed(self):
        return self.result[0] if self.result else 0

    @property
    def failed(self):
        if self.result is None:
            return 1  # it ran and ended without a result: count it as one failure
        return self.result[1]

    @property
    def ignored(self):
        return self.result[2] if self.result else 0

    def failure_block(self):
        """The lines that say what broke: libtest's `failures:` sections,
        or, for a binary that died, the end of what it printed."""
        if self.result is None:
            body = [l for l in self.lines if l.strip()][-MAX_BLOCK_LINES:]
            return body + ["(ended without a result: %s)" % (self.crash or "no result line")]
        start = next((i for i, l in enumerate(self.lines) if l == "failures:"), None)
        if start is None:
            return []
        end = next(
            (i for i in range(start, len(self.lines)) if _RESULT.match(self.lines[i])),
            len(self.lines),
        )
        return self.lines[start:end]


def _binary_name(kind, path):
    """`tests/forwarding.rs` + `target/release/deps/forwarding-ec56...` ->
    `forwarding (tests/forwarding.rs)`."""
    base = os.path.basename(path)
    stem = re.sub(r"-[0-9a-f]{16}$", "", base)
    source = kind.split()[-1]
    return "%s (%s)" % (stem, source)


def parse_cargo(text):
    """Every test binary of a `cargo test` log, in the order they ran."""
    binaries = []
    cur = None
    for line in text.splitlines():
        m = _RUNNING.match(line)
        d = _DOCTESTS.match(line)
        if m or d:
            cur = Binary(_binary_name(m.group(1), m.group(2)) if m else "doc-tests of %s" % d.group(1))
            binaries.append(cur)
            continue
        if cur is None:
            continue
        cur.lines.append(line)
        r = _RESULT.match(line)
        if r:
            cur.result = (int(r.group(2)), int(r.group(3)), int(r.group(4)))
            continue
        i = _IGNORED.match(line)
        if i:
            cur.ignored_reasons.append(i.group(2) or "")
            continue
        i = _IGNORED_ALONE.match(line)
        if i:
            cur.ignored_reasons.append(i.group(1) or "")
            continue
        c = _CAUSED.search(line)
        if c and cur.result is None:
            cur.crash = c.group(1)
    return binaries


class Counts:
    """Tests summed over steps."""

    def __init__(self, passed=0, failed=0, ignored=0, ignored_gpu=0):
        self.passed = passed
        self.failed = failed
        self.ignored = ignored
        self.ignored_gpu = ignored_gpu  # of `ignored`, those whose reason is a GPU

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.ignored += other.ignored
        self.ignored_gpu += other.ignored_gpu


def cargo_counts(binaries):
    c = Counts()
    for b in binaries:
        gpu = sum(1 for r in b.ignored_reasons if "GPU" in r)
        c.add(Counts(b.passed, b.failed, b.ignored, min(gpu, b.ignored)))
    return c


_PYTEST_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)"
    r"(?:, )?)+) in [\d.]+s"
)


def parse_pytest(text):
    """pytest's counts from its last summary line, or None when it has none
    (pytest did not get to run)."""
    found = None
    for line in text.splitlines():
        m = _PYTEST_SUMMARY.match(line.strip())
        if m:
            found = {}
            for part in m.group(1).split(", "):
                n, what = part.split(" ", 1)
                what = {"error": "errors", "warning": "warnings"}.get(what, what)
                found[what] = found.get(what, 0) + int(n)
    return found


def pytest_counts(found):
    return Counts(
        passed=found.get("passed", 0) + found.get("xfailed", 0),
        failed=found.get("failed", 0) + found.get("errors", 0) + found.get("xpassed", 0),
        ignored=found.get("skipped", 0),
    )


def pytest_failures(text):
    """pytest's FAILURES and ERRORS sections and its short summary."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"^=+ (FAILURES|ERRORS) =+$", l)), None)
    if start is None:
        return []
    return lines[start:]


def _clip(lines, log):
    if len(lines) <= MAX_BLOCK_LINES:
        return lines
    return lines[:MAX_BLOCK_LINES] + [
        "... %d more lines in %s" % (len(lines) - MAX_BLOCK_LINES, log)
    ]


def report_cargo(text, log):
    """The lines scripts/test.sh prints for a `cargo test` log."""
    bins = parse_cargo(text)
    out = []
    width = max([len(b.name) for b in bins] + [0])
    for b in bins:
        if b.result is None:
            state = "CRASHED (%s)" % (b.crash or "no result line")
        else:
            state = "%d passed, %d failed, %d ignored" % b.result
        out.append("  %-*s  %s" % (width, b.name, state))
    for b in bins:
        if b.failed:
            out.append("")
            out.append("-- %s failed:" % b.name)
            out.extend("   " + l for l in _clip(b.failure_block(), log))
    return out


def report_pytest(text, log):
    found = parse_pytest(text)
    if found is None:
        return ["  pytest gave no result line; see %s" % log] + [
            "   " + l for l in _clip(text.splitlines()[-MAX_BLOCK_LINES:], log)
        ]
    c = pytest_counts(found)
    out = ["  python/tests  %d passed, %d failed, %d skipped" % (c.passed, c.failed, c.ignored)]
    if c.failed:
        out.append("")
        out.extend("   " + l for l in _clip(pytest_failures(text), log))
    return out


def _duration(seconds):
    seconds = int(seconds)
    if seconds < 60:
        return "%ds" % seconds
    return "%dm%02ds" % (seconds // 60, seconds % 60)


def verdict_line(counts, failed_checks, ok_checks, seconds):
    """The one line scripts/test.sh ends with."""
    if counts.ignored == counts.ignored_gpu:
        why = "not run: need a GPU"
    else:
        why = "not run: %d need a GPU, %d for other reasons" % (
            counts.ignored_gpu,
            counts.ignored - counts.ignored_gpu,
        )
    line = "tests: %d passed, %d failed, %d ignored (%s) in %s" % (
        counts.passed,
        counts.failed,
        counts.ignored,
        why,
        _duration(seconds),
    )
    if failed_checks:
        line += "; FAILED: %s" % ", ".join(failed_checks)
        if ok_checks:
            line += " (ok: %s)" % ", ".join(ok_checks)
    elif ok_checks:
        line += "; ok: %s" % ", ".join(ok_checks)
    return line


def read_steps(logdir):
    """The steps scripts/test.sh ran, in order: (name, kind, exit status, log).
    It writes LOGDIR/steps, one `name kind log` line each, and the exit
    status of each in LOG.rc; a step without one did not finish."""
    steps = []
    with open(os.path.join(logdir, "steps")) as f:
        for line in f:
            if not line.strip():
                continue
            name, kind, log = line.split()
            try:
                with open(log + ".rc") as r:
                    rc = int(r.read().strip())
            except (OSError, ValueError):
                rc = None
            steps.append((name, kind, rc, log))
    return steps


def final(steps, seconds):
    """The summary lines and the exit status for the steps that ran."""
    counts = Counts()
    failed_checks, ok_checks = [], []
    for name, kind, rc, log in steps:
        try:
            with open(log, errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        if kind == "cargo":
            bins = parse_cargo(text)
            c = cargo_counts(bins)
            counts.add(c)
            if rc != 0 and c.failed == 0:
                # cargo failed without a failing test: a build error.
                failed_checks.append("%s (exit %s, no test ran to a failure: see %s)" % (name, rc, log))
        elif kind == "pytest":
            found = parse_pytest(text)
            if found is None:
                failed_checks.append("%s (no pytest result: see %s)" % (name, log))
            else:
                c = pytest_counts(found)
                counts.add(c)
                if rc != 0 and c.failed == 0:
                    failed_checks.append("%s (exit %s: see %s)" % (name, rc, log))
        elif rc == 0:
            ok_checks.append(name)
        else:
            failed_checks.append(name if rc is not None else "%s (did not finish)" % name)
    line = verdict_line(counts, failed_checks, ok_checks, seconds)
    status = 1 if counts.failed or failed_checks else 0
    return line, status


def main(argv):
    if len(argv) == 4 and argv[1] == "report" and argv[2] in ("cargo", "pytest"):
        with open(argv[3], errors="replace") as f:
            text = f.read()
        rep = report_cargo if argv[2] == "cargo" else report_pytest
        print("\n".join(rep(text, argv[3])))
        return 0
    if len(argv) == 4 and argv[1] == "final":
        line, status = final(read_steps(argv[2]), float(argv[3]))
        print(line)
        return status
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
