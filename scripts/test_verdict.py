"""Tests of scripts/verdict.py on real output: testdata/verdict holds what
cargo 1.95 and pytest 9 printed for a small crate and test file with a
passing, a failing, an ignored and a crashing test.

Run: python3 -m unittest discover -s scripts -p 'test_verdict.py'
(scripts/test.sh does, before anything else)."""

import os
import tempfile
import unittest

import verdict

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "verdict")


def data(name):
    with open(os.path.join(DATA, name)) as f:
        return f.read()


class CargoLog(unittest.TestCase):
    def test_every_binary_with_its_counts_and_a_crash_counts_as_one_failure(self):
        bins = verdict.parse_cargo(data("cargo-fail.txt"))
        self.assertEqual(
            [(b.name, b.result) for b in bins],
            [
                ("fixture (src/lib.rs)", (1, 1, 2)),
                ("aborts (tests/aborts.rs)", None),
                ("ok (tests/ok.rs)", (2, 0, 0)),
                ("doc-tests of fixture", (1, 0, 0)),
            ],
        )
        self.assertEqual(bins[1].crash, "signal: 6, SIGABRT: process abort signal")
        c = verdict.cargo_counts(bins)
        self.assertEqual((c.passed, c.failed, c.ignored, c.ignored_gpu), (4, 2, 2, 1))

    def test_an_ignored_verdict_pushed_onto_its_own_line_by_stderr_still_counts_as_a_gpu_one(self):
        log = "\n".join([
            "     Running unittests src/lib.rs (target/debug/deps/x-0123)",
            "",
            "running 3 tests",
            "test a ... ok",
            "test gpu::b ... tpcomm: another test's stderr, no newline before the verdict",
            "ignored, needs a GPU: cargo test -- --ignored",
            "test gpu::c ... ignored, needs a GPU: cargo test -- --ignored",
            "",
            "test result: ok. 1 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "",
        ])
        c = verdict.cargo_counts(verdict.parse_cargo(log))
        self.assertEqual((c.passed, c.failed, c.ignored, c.ignored_gpu), (1, 0, 2, 2))

    def test_the_failing_block_names_the_test_and_its_message(self):
        bins = verdict.parse_cargo(data("cargo-fail.txt"))
        block = bins[0].failure_block()
        self.assertEqual(block[0], "failures:")
        self.assertIn("---- tests::fails stdout ----", block)
        self.assertIn("assertion `left == right` failed: two and two", block)
        self.assertEqual(block[-2:], ["    tests::fails", ""])
        self.assertFalse(any(l.startswith("test result") for l in block))
        self.assertEqual(bins[2].failure_block(), [])
        self.assertIn("(ended without a result: signal: 6", bins[1].failure_block()[-1])

    def test_report_prints_result_lines_and_only_the_failures(self):
        out = verdict.report_cargo(data("cargo-fail.txt"), "LOG")
        self.assertEqual(out[0].split(), ["fixture", "(src/lib.rs)", "1", "passed,", "1", "failed,", "2", "ignored"])
        self.assertIn("CRASHED (signal: 6", out[1])
        text = "\n".join(out)
        self.assertIn("-- fixture (src/lib.rs) failed:", text)
        self.assertIn("-- aborts (tests/aborts.rs) failed:", text)
        self.assertNotIn("-- ok (tests/ok.rs)", text)
        # A passing test's stderr is not repeated.
        self.assertNotIn("boom", text)

    def test_a_long_failure_is_clipped_with_a_pointer_to_the_log(self):
        text = data("cargo-fail.txt").replace(
            "some stderr from the failing test", "\n".join("line %d" % i for i in range(200))
        )
        out = verdict.report_cargo(text, "target/test-logs/x.log")
        self.assertTrue(any("more lines in target/test-logs/x.log" in l for l in out))
        self.assertLess(len(out), 2 * verdict.MAX_BLOCK_LINES)

    def test_a_passing_log(self):
        bins = verdict.parse_cargo(data("cargo-pass.txt"))
        self.assertEqual([(b.name, b.result) for b in bins], [("ok (tests/ok.rs)", (2, 0, 0))])
        self.assertEqual(verdict.report_cargo(data("cargo-pass.txt"), "LOG"), ["  ok (tests/ok.rs)  2 passed, 0 failed, 0 ignored"])

    def test_a_build_error_has_no_binaries(self):
        self.assertEqual(verdict.parse_cargo(data("cargo-build-error.txt")), [])


class PytestLog(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(verdict.parse_pytest(data("pytest-fail.txt")), {"failed": 1, "passed": 3, "skipped": 1})
        self.assertEqual(verdict.parse_pytest(data("pytest-pass.txt")), {"passed": 1})
        self.assertIsNone(verdict.parse_pytest("ERROR: could not install\n"))
        self.assertEqual(verdict.parse_pytest("== 2 passed, 1 error, 3 warnings in 1.20s ==\n"), {"passed": 2, "errors": 1, "warnings": 3})

    def test_report_shows_the_failure(self):
        out = "\n".join(verdict.report_pytest(data("pytest-fail.txt"), "LOG"))
        self.assertIn("3 passed, 1 failed, 1 skipped", out)
        self.assertIn("AssertionError: arithmetic", out)
        self.assertIn("FAILED test_f.py::test_bad", out)


class Final(unittest.TestCase):
    def steps(self, spec):
        """Writes logs as scripts/test.sh does: spec is (name, kind, rc, text)."""
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        with open(os.path.join(d.name, "steps"), "w") as s:
            for name, kind, rc, text in spec:
                log = os.path.join(d.name, name + ".log")
                with open(log, "w") as f:
                    f.write(text)
                if rc is not None:
                    with open(log + ".rc", "w") as f:
                        f.write("%d\n" % rc)
                s.write("%s %s %s\n" % (name, kind, log))
        return verdict.read_steps(d.name)

    def test_all_passing(self):
        line, status = verdict.final(
            self.steps(
                [
                    ("fmt", "check", 0, ""),
                    ("clippy", "check", 0, ""),
                    ("cargo-test", "cargo", 0, data("cargo-pass.txt")),
                    ("wheel-tests", "pytest", 0, data("pytest-pass.txt")),
                ]
            ),
            341,
        )
        self.assertEqual(line, "tests: 3 passed, 0 failed, 0 ignored (not run: need a GPU) in 5m41s; ok: fmt, clippy")
        self.assertEqual(status, 0)

    def test_failing_tests_and_checks_show_in_the_line_and_the_status(self):
        line, status = verdict.final(
            self.steps(
                [
                    ("fmt", "check", 0, ""),
                    ("clippy", "check", 101, "error: unused variable"),
                    ("cargo-test", "cargo", 101, data("cargo-fail.txt")),
                    ("wheel-tests", "pytest", 1, data("pytest-fail.txt")),
                    ("temp-dir", "check", None, ""),
                ]
            ),
            59,
        )
        self.assertEqual(
            line,
            "tests: 7 passed, 3 failed, 3 ignored (not run: 1 need a GPU, 2 for other reasons) in 59s;"
            " FAILED: clippy, temp-dir (did not finish) (ok: fmt)",
        )
        self.assertEqual(status, 1)

    def test_a_check_failing_alone_fails_the_run(self):
        line, status = verdict.final(
            self.steps([("fmt", "check", 1, "Diff in x.rs"), ("cargo-test", "cargo", 0, data("cargo-pass.txt"))]), 5
        )
        self.assertIn("0 failed", line)
        self.assertTrue(line.endswith("; FAILED: fmt"), line)
        self.assertEqual(status, 1)

    def test_a_build_error_is_a_failure_though_no_test_failed(self):
        line, status = verdict.final(self.steps([("cargo-test", "cargo", 101, data("cargo-build-error.txt"))]), 5)
        self.assertIn("FAILED: cargo-test (exit 101", line)
        self.assertEqual(status, 1)

    def test_pytest_that_never_ran_is_a_failure(self):
        line, status = verdict.final(self.steps([("wheel-tests", "pytest", 1, "pip: no network\n")]), 5)
        self.assertIn("FAILED: wheel-tests (no pytest result", line)
        self.assertEqual(status, 1)


if __name__ == "__main__":
    unittest.main()
