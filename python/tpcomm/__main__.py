"""``python -m tpcomm`` (and the ``tpcomm`` script pip installs).

    python -m tpcomm run [--no-pynccl] -- CMD [ARGS...]
        run CMD with the NCCL drop-in preloaded (see tpcomm.preload_env)
    python -m tpcomm dropin-path      print the drop-in's path
    python -m tpcomm env              print the variables `run` sets, as shell exports
    python -m tpcomm OTHER [ARGS...]  the bundled tpcomm command (bench, probe,
                                      tune, explain, plan; `help` lists them)
"""

import os
import shlex
import subprocess
import sys

USAGE = __doc__.split("\n", 2)[2]


def _fail(msg, code=2):
    print(f"tpcomm: {msg}", file=sys.stderr)
    return code


def _exec(argv, env):
    """Replaces this process with argv[0] (looked up in PATH); returns an
    exit status only when that cannot start."""
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        return _fail(f"{argv[0]}: command not found", 127)
    except PermissionError:
        return _fail(f"{argv[0]}: not executable", 126)
    except OSError as e:
        return _fail(f"{argv[0]}: cannot start: {e}", 126)


def _run(args):
    import tpcomm

    pynccl = True
    while args and args[0] != "--":
        if args[0] == "--no-pynccl":
            pynccl = False
            args = args[1:]
        elif args[0] in ("-h", "--help"):
            print(USAGE)
            return 0
        else:
            break
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        return _fail("run needs a command: python -m tpcomm run -- CMD [ARGS...]")
    try:
        env = tpcomm.preload_env(pynccl=pynccl)
    except FileNotFoundError as e:
        return _fail(str(e), 1)
    return _exec(args, env)


def main(argv=None):
    """The command; a closed stdout (``python -m tpcomm --help | head -1``)
    ends it quietly with status 0, as the bundled command does."""
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at nothing first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def _main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    import tpcomm

    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        try:
            # The bundled command's own help, so one --help shows every command.
            sys.stdout.flush()
            subprocess.run([tpcomm.cli_path(), "--help"], check=False)
        except (FileNotFoundError, OSError) as e:
            print(f"(the bundled tpcomm command is not available: {e})")
        return 0 if args else 2
    cmd, rest = args[0], args[1:]

    if cmd == "run":
        return _run(rest)
    try:
        if cmd == "dropin-path":
            print(tpcomm.dropin_path())
            return 0
        if cmd == "env":
            env = tpcomm.preload_env(pynccl="--no-pynccl" not in rest)
            keys = ["LD_PRELOAD", "VLLM_NCCL_SO_PATH", "SGLANG_NCCL_SO_PATH", tpcomm.NVRTC_LIBRARY_ENV]
            for k in keys:
                if k in env:
                    print(f"export {k}={shlex.quote(env[k])}")
            return 0
        binary = tpcomm.cli_path()
    except FileNotFoundError as e:
        return _fail(str(e), 1)
    # The command finds NVRTC like the library does.
    env = dict(os.environ)
    return _exec([binary] + args, env)


if __name__ == "__main__":
    sys.exit(main())
