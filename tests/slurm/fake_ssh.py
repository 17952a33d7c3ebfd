"""A stand-in for OpenSSH's ``ssh`` in transport tests, found first on PATH as ``ssh``.

It checks nothing itself: it records its argv and environment in RECORD (a path written into
this file by the test), then acts by destination host:

* ``down``: says what ssh says when a host refuses, exits 255 (no command ran);
* ``hang``: starts a sleeping child, records its PID, and sleeps (a stalled login);
* ``dropped``: runs the command, then says what ssh says when a host refuses and exits 255,
  so a command that ran comes back with a message no real session could print;
* ``cut``: runs the command, then exits 255 saying nothing (a session whose master connection
  was told to exit, ``ssh -O exit``, mid-command);
* ``hop``: says a first hop refused, runs the command with all its output lost, then says the
  connection closed and exits 255 (a ProxyCommand that fell back to a second gateway);
* anything else: prints a login banner and shell-startup noise on stdout and stderr, then runs
  the remote command with ``/bin/sh -c`` in a login-like environment, as sshd would.
"""

import json
import os
import subprocess
import sys
import time

RECORD = "@RECORD@"
args = sys.argv[1:]
env = dict(os.environ)
if env.get("LC_CTYPE") == "C.UTF-8":
    del env["LC_CTYPE"]  # Python adds it when started without a locale (PEP 538)
with open(RECORD, "w") as handle:
    json.dump({"argv": args, "env": env}, handle)
host = args[-3] if len(args) >= 3 else ""
if host == "down":
    sys.stderr.write("ssh: connect to host down port 22: Connection refused\r\n")
    sys.exit(255)
if host == "hang":
    child = subprocess.Popen(["/bin/sleep", "60"])
    with open(RECORD + ".child", "w") as handle:
        handle.write(str(child.pid))
    time.sleep(60)
    sys.exit(255)
os.write(1, b"Welcome to the cluster!\n\xff\xfe binary motd 0123456789abcdef>\nno newline")
os.write(2, b"Last login: yesterday\nmodule: command not found\n")
remote_env = {
    "HOME": "/home/alice",
    "PATH": "/usr/local/bin:/usr/bin:/bin:/opt/junk",
    "LANG": "C.UTF-8",
    "TZ": "Europe/Rome",
    "REMOTE_JUNK": "1",
    "SLURM_CONF": "/wrong",
}
if host == "hop":
    sys.stderr.write("ssh: connect to host gw1 port 22: Connection refused\r\n")
    sys.stderr.flush()
    lost = subprocess.DEVNULL
    subprocess.run(
        ["/bin/sh", "-c", args[-1]], env=remote_env, check=False, stdout=lost, stderr=lost
    )
    sys.stderr.write("Connection to cluster closed by remote host.\r\n")
    sys.exit(255)
if host == "cut":
    subprocess.run(["/bin/sh", "-c", args[-1]], env=remote_env, check=False)
    sys.exit(255)
if host == "dropped":
    subprocess.run(["/bin/sh", "-c", args[-1]], env=remote_env, check=False)
    sys.stderr.write("ssh: connect to host dropped port 22: Connection refused\r\n")
    sys.exit(255)
os.execve("/bin/sh", ["sh", "-c", args[-1]], remote_env)
