# The reference Python of the tests (DTRAIN_REF_PYTHON, Debian's python3-torch), started once per
# test instead of once per script: `import torch` costs a Python process about 1.2 s on 2 cores
# (and its teardown at exit 0.4 s), more than most reference scripts take to run, and a test runs
# up to a dozen of them. So a test starts this file as a server, which imports torch once;
# each script then runs in a fork of it (a fresh copy of that interpreter, as a new process would
# be after its own `import torch`), with the caller's arguments, environment, working directory
# and standard input, output and error (passed as file descriptors over a Unix socket), and the
# caller gets its exit code. Nothing a script does reaches the next one.
#
#   PYTHON ref_python.py serve SOCKET          the server (in the background; it ends when the
#                                              process that started it does, or SOCKET goes)
#   PYTHON -S ref_python.py run SOCKET PYTHON ARGS...
#                                              run `PYTHON ARGS...` through the server; ARGS is
#                                              `- [args]` (the script on standard input),
#                                              `-c CODE [args]` or `SCRIPT [args]`
#
# The client falls back to running `PYTHON ARGS...` itself (exec) when there is no server, when
# the server cannot import torch (the script then fails as it did before, naming what is
# missing), for other forms of ARGS, and when the caller's environment differs from the server's
# in what Python or the thread pools read at start-up (PYTHON*, OMP_*, MKL_* besides PYTHONPATH,
# which the fork applies). Used by tests/e2e/common.sh (e2e_torch_python), so by the e2e, cluster
# and slurm tiers; the unit tests run each script in a process of its own (one or two a test).
import json
import os
import signal
import socket
import sys


def startup_env(env):
    """What a fresh interpreter would read at start-up besides PYTHONPATH."""
    return {k: v for k, v in env.items()
            if (k.startswith(("PYTHON", "OMP_", "MKL_")) and k != "PYTHONPATH")}


def lines(conn):
    buf = b""
    while True:
        part = conn.recv(4096)
        if not part:
            return
        buf += part
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


# ---- client ---------------------------------------------------------------------------------------
def client(sock_path, python, args):
    def fallback():
        os.execv(python, [python] + args)

    if not args or not (args[0] == "-" or (args[0] == "-c" and len(args) > 1)
                        or not args[0].startswith("-")):
        fallback()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
    except OSError:
        fallback()
    request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    runner = 0

    def forward(sig, _frame):
        if runner:
            os.kill(runner, sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, forward)
    for reply in lines(conn):
        if reply.get("fallback"):
            conn.close()
            fallback()
        if "pid" in reply:
            runner = reply["pid"]
        if "status" in reply:
            sys.exit(reply["status"])
    sys.exit(255)  # the server went away mid-script


# ---- the fork that runs one script ----------------------------------------------------------------
def run_script(request, fds, base_path, threads):
    import atexit
    import builtins
    import gc
    import types
    import torch
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    torch.set_num_threads(threads)  # as this environment gave the server at its start
    args = request["args"]
    if args[0] == "-":
        name, source, argv, path0 = "<stdin>", sys.stdin.buffer.read(), args, ""
    elif args[0] == "-c":
        name, source, argv, path0 = "<string>", args[1], ["-c"] + args[2:], ""
    else:
        name = args[0]
        with open(name, "rb") as f:
            source = f.read()
        argv, path0 = args, os.path.dirname(os.path.realpath(name))
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [path0] + [os.path.abspath(p) for p in extra] + base_path
    sys.argv = argv
    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "__spec__": None, "__loader__": None})
    if name[0] != "<":
        main.__file__ = name
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(source, name, "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        kind, error, trace = sys.exc_info()
        error.__traceback__ = trace.tb_next  # the traceback from the script's first line on
        sys.excepthook(kind, error, trace.tb_next)
        code = 1
    # The end of a process without the interpreter's teardown of torch (0.4 s): the script's
    # objects go first (its open files are flushed and closed), then the atexit functions run.
    main.__dict__.clear()
    gc.collect()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


# ---- server ---------------------------------------------------------------------------------------
def serve(sock_path):
    parent = os.getppid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(16)  # callers wait in the backlog while torch loads
    # sys.path without this file's folder (sys.path[0]) and the server's PYTHONPATH: each script
    # gets its own caller's.
    own = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if p not in own]
    env = startup_env(os.environ)
    try:
        import torch
        threads = torch.get_num_threads()  # starts no thread: forking stays safe
        ready = True
    except Exception as e:  # scripts then run in PYTHON itself, and fail there as they would
        print(f"ref_python.py: no torch ({e}): every script runs in a process of its own",
              file=sys.stderr)
        ready, threads = False, 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters below reap themselves
    srv.settimeout(0.5)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            # The test that started the server is gone, or its folder is.
            if os.getppid() != parent or not os.path.exists(sock_path):
                return
            continue
        # A caller that went away (or never sends) costs this request only, never the next ones.
        conn.settimeout(10)
        fds = []
        try:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
            while message and not message.endswith(b"\n"):
                part = conn.recv(1 << 22)
                if not part:
                    break
                message += part
            request = json.loads(message) if message.endswith(b"\n") else None
        except (OSError, ValueError):
            request = None
        if request is None:
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        conn.settimeout(None)
        if not ready or len(fds) != 3 or startup_env(request["env"]) != env:
            conn.sendall(b'{"fallback": true}\n')
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        if os.fork() == 0:  # the waiter: starts the script's process, reports its end
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            runner = os.fork()
            if runner == 0:
                conn.close()
                run_script(request, fds, base_path, threads)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": runner}).encode() + b"\n")
            _, status = os.waitpid(runner, 0)
            code = os.waitstatus_to_exitcode(status)
            conn.sendall(json.dumps({"status": code if code >= 0 else 128 - code}).encode() + b"\n")
            os._exit(0)
        for fd in fds:
            os.close(fd)
        conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4:])
