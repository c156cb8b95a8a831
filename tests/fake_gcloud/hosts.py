#!/usr/bin/env python3
"""The emulated pod's hosts: each TPU host VM of the fake node is a machine of its own, made of
Linux namespaces on this one (root only).

    hosts.py setup ROOT HOSTS    the bridge and one network namespace per host, recorded in
                                 ROOT/state.json under "emulate"; prints the bridge address
    hosts.py teardown ROOT       every host's processes killed, its namespaces and the bridge
                                 removed (safe to run twice, and after a crash)
    hosts.py sweep               teardown of the leftovers of test processes that are gone
    hosts.py run ROOT I CMD      CMD in host I as its login user would run it (for tests)

A host is:
- a network namespace `podqtest-<pid>-<tag>-h<i>` whose eth0 sits on the bridge
  `pq<tag>br` with the address <subnet>.<i+2>/24; the bridge (this machine, where the worker
  runs) is <subnet>.1. There is no default route: a host reaches the worker and the other
  hosts of its pod and nothing else, and its 127.0.0.1 is its own loopback, as on a TPU VM;
- a PID namespace whose init is `hosts.py init`: when it dies every process of the host dies
  with it, and only there, which is what a reboot or a lost VM does;
- a mount namespace in which /home, /tmp and /var/tmp are the host's own directories
  (ROOT/hosts/host-<i>/{home,tmp,vartmp}), so the test can look at them from outside. A
  reboot empties tmp and vartmp and keeps home (Compute Engine keeps the boot disk across a
  reset, https://cloud.google.com/compute/docs/instances/instance-life-cycle#reset; /tmp is
  a tmpfs cleared at boot on the TPU VM images); a recreated node has new, empty disks. A
  checkout that lies under one of them (a clone in /tmp) is mounted back at its own path,
  so the hosts still find the build and the venv, as real hosts find their code.

Commands run in a fresh login environment: HOME, USER, LOGNAME, PATH, LANG and SHELL, and
nothing of the caller's, which is what sshd gives a session.

Traffic stays on this machine: the bridge has no uplink and the hosts no default route.
"""

import fcntl
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "podqtest"
# The addresses of the hosts: 10.213.<n>.0/24, one <n> per emulated pod on this machine.
NET = "10.213"
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Directories of the real machine that each host has its own of.
PRIVATE = ("/home", "/tmp", "/var/tmp")


def sh(*args, check=True):
    out = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), out.stderr.strip()))
    return out


def fail(message):
    sys.stderr.write("emulated pod: %s\n" % message)
    sys.exit(2)


def host_dir(root, i):
    return os.path.join(root, "hosts", "host-%d" % i)


def netns(emu, i):
    return "%s-%d-%s-h%d" % (PREFIX, emu["owner"], emu["tag"], i + emu.get("offset", 0))


def address(emu, i):
    return "%s.%d" % (emu["subnet"], i + emu.get("offset", 0) + 2)


def hostname(i):
    """A TPU VM host's name is t1v-n-<id>-w-<i>."""
    return "t1v-n-podqtest-w-%d" % i


def bridge(tag):
    return "pq%sbr" % tag


def can_emulate():
    """Why this machine cannot make the hosts, or None."""
    if os.geteuid() != 0:
        return ("the emulated pod's hosts are Linux namespaces (network, mount, PID), which "
                "need root; run the tests as root (CI does)")
    for tool in ("ip", "unshare", "nsenter"):
        if not shutil.which(tool):
            return "the emulated pod needs `%s` (Debian's iproute2 and util-linux)" % tool
    return None


def checkout_hidden():
    """The checkout, when it lies under a directory each host has its own of (a clone in
    /tmp): the hosts must still see it (its binaries, the venv, the tests' shared data)."""
    checkout = os.path.dirname(os.path.dirname(HERE))
    for private in PRIVATE:
        if checkout == private or checkout.startswith(private + "/"):
            return checkout
    return None


def used_subnets():
    out = sh("ip", "-o", "-4", "addr", "show").stdout
    return set(re.findall(r"inet (%s\.\d+)\.\d+/" % re.escape(NET), out))


def setup(root, hosts):
    why = can_emulate()
    if why:
        fail(why)
    sweep()
    emu = {"owner": os.getppid(), "tag": "%05x" % random.randrange(16 ** 5), "hosts": hosts}
    # One subnet per pod: chosen under a lock so two pods set up at once do not share one.
    with open("/run/podqtest.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = used_subnets()
        free = [n for n in range(1, 255) if "%s.%d" % (NET, n) not in used]
        if not free:
            fail("no free %s.<n>.0/24 subnet left for another emulated pod" % NET)
        emu["subnet"] = "%s.%d" % (NET, random.choice(free))
        br = bridge(emu["tag"])
        sh("ip", "link", "add", br, "type", "bridge")
        sh("ip", "addr", "add", emu["subnet"] + ".1/24", "dev", br)
        sh("ip", "link", "set", br, "up")
    emu["bridge_address"] = emu["subnet"] + ".1"
    for i in range(hosts):
        add_host_network(emu, i)
        for d in ("home", "tmp", "vartmp"):
            os.makedirs(os.path.join(host_dir(root, i), d), exist_ok=True)
    state_path = os.path.join(root, "state.json")
    with open(state_path) as f:
        state = json.load(f)
    state["emulate"] = emu
    node = state.get("node")
    if node and node.get("networkEndpoints"):
        node["networkEndpoints"] = [{"ipAddress": address(emu, i), "port": 8470}
                                    for i in range(len(node["networkEndpoints"]))]
    with open(state_path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(state_path + ".tmp", state_path)
    print(emu["bridge_address"])


def join(root, hosts, fleet_emu, slot):
    """The hosts of one slice of a fleet (the fake's zones, tests/fake_gcloud/gcloud): machines
    on the fleet's bridge, so one worker address reaches every slice's agents. Slice `slot`
    takes the addresses after the slots before it; recorded in ROOT/state.json."""
    per_bridge = 250 // max(1, hosts)
    emu = dict(fleet_emu, hosts=hosts, offset=(slot % per_bridge) * hosts)
    for i in range(hosts):
        add_host_network(emu, i)
        for d in ("home", "tmp", "vartmp"):
            os.makedirs(os.path.join(host_dir(root, i), d), exist_ok=True)
    return emu


def add_host_network(emu, i):
    ns = netns(emu, i)
    if os.path.exists("/run/netns/" + ns):
        return
    veth = "pq%sh%d" % (emu["tag"], i + emu.get("offset", 0))
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "link", "set", veth, "master", bridge(emu["tag"]), "up")
    sh("ip", "-n", ns, "addr", "add", address(emu, i) + "/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")


def init_pid(root, i):
    """The host's init (as this machine numbers it) while the host is up, else None."""
    try:
        pid = int(open(os.path.join(host_dir(root, i), "init.pid")).read())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"hosts.py\0init" in f.read():
                return pid
    except (OSError, ValueError):
        pass
    return None


def boot(root, emu, i):
    """Starts host i if it is down; returns once it takes commands. A pod being torn down
    boots nothing: a gcloud call the killed worker left running must not bring a host back
    after its teardown."""
    if init_pid(root, i):
        return
    if os.path.exists(os.path.join(root, "torn-down")):
        fail("the emulated pod at %s is torn down" % root)
    d = host_dir(root, i)
    for sub in ("home", "tmp", "vartmp"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    add_host_network(emu, i)
    ready = os.path.join(d, "init.ready")
    try:
        os.remove(ready)
    except FileNotFoundError:
        pass
    # Compute Engine's internal DNS resolves every VM's name inside the VPC
    # (https://cloud.google.com/compute/docs/internal-dns); gloo and JAX look their own
    # hostname up. /etc/hosts stands for it.
    with open(os.path.join(d, "etc-hosts"), "w") as f:
        f.write("127.0.0.1 localhost\n")
        for h in range(emu["hosts"]):
            f.write("%s %s\n" % (address(emu, h), hostname(h)))
    log = open(os.path.join(d, "init.log"), "a")
    unshare = subprocess.Popen(
        ["ip", "netns", "exec", netns(emu, i), "unshare", "--pid", "--fork", "--mount",
         "--uts", "--propagation", "private", "--mount-proc", sys.executable,
         os.path.abspath(__file__), "init", d, hostname(i)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.time() + 10
    while not os.path.exists(ready):
        if unshare.poll() is not None or time.time() > deadline:
            fail("host %d did not boot: see %s" % (i, os.path.join(d, "init.log")))
        time.sleep(0.01)
    # The init is unshare's child; as this machine numbers it.
    pid = None
    while pid is None and time.time() < deadline:
        for task in glob.glob("/proc/%d/task/*/children" % unshare.pid):
            kids = open(task).read().split()
            if kids:
                pid = int(kids[0])
        if pid is None:
            time.sleep(0.01)
    if pid is None:
        fail("host %d booted but its init cannot be found" % i)
    with open(os.path.join(d, "init.pid"), "w") as f:
        f.write(str(pid))


def halt(root, i):
    """Host i is gone at once (power off, lost VM): every process on it is killed."""
    pid = init_pid(root, i)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        deadline = time.time() + 10
        while os.path.exists("/proc/%d" % pid) and time.time() < deadline:
            time.sleep(0.01)
    try:
        os.remove(os.path.join(host_dir(root, i), "init.pid"))
    except FileNotFoundError:
        pass


def shutdown(root, i, grace_s):
    """An ACPI soft off: every process gets SIGTERM, and what is left after `grace_s` is
    killed with the host. Detached: the caller goes on at once."""
    pid = init_pid(root, i)
    if pid:
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "halt-after", root, str(i),
                          str(grace_s)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)


def wipe(root, i, keep_home):
    d = host_dir(root, i)
    for sub in ("tmp", "vartmp") if keep_home else ("home", "tmp", "vartmp"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
        os.makedirs(os.path.join(d, sub), exist_ok=True)


def login_env(user, home):
    return {"HOME": home, "USER": user, "LOGNAME": user, "PATH": LOGIN_PATH,
            "LANG": "C.UTF-8", "SHELL": "/bin/bash"}


def enter(root, i, user, argv, **popen):
    """A process running `argv` on host i as `user` would, in a fresh login environment;
    None when the host is down."""
    pid = init_pid(root, i)
    if not pid:
        return None
    home = "/home/" + user
    os.makedirs(os.path.join(host_dir(root, i), "home", user), exist_ok=True)
    return subprocess.Popen(
        ["nsenter", "--target", str(pid), "--pid", "--mount", "--net", "--uts", "--",
         "env", "-i"] + ["%s=%s" % kv for kv in login_env(user, home).items()]
        # nsenter's --wd opens the directory before it enters the mount namespace.
        + ["sh", "-c", 'cd "$HOME" && exec "$@"', "sh"] + argv,
        **popen)


def teardown(root):
    try:
        with open(os.path.join(root, "state.json")) as f:
            emu = json.load(f).get("emulate")
    except (OSError, ValueError):
        emu = None
    if not emu:
        return
    for each in [root] + glob.glob(os.path.join(root, "slices", "*")):
        open(os.path.join(each, "torn-down"), "w").close()
    for i in range(64):
        halt(root, i)
    # A fleet's slices keep their hosts under ROOT/slices/<name>/hosts.
    kill_inits(lambda host_dir: host_dir.startswith(root.rstrip("/") + "/"))
    remove(emu["owner"], emu["tag"])


def kill_inits(whose):
    """SIGKILL to every host init whose host directory `whose` accepts: the whole host goes."""
    for proc in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            args = open(proc, "rb").read().split(b"\0")
        except OSError:
            continue
        for k in range(len(args) - 2):
            if args[k].endswith(b"hosts.py") and args[k + 1] == b"init":
                if whose(args[k + 2].decode(errors="replace")):
                    try:
                        os.kill(int(proc.split("/")[2]), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
                break


def remove(owner, tag):
    """Kills whatever still runs in the pod's namespaces and deletes them and its bridge."""
    for path in glob.glob("/run/netns/%s-%d-%s-h*" % (PREFIX, owner, tag)):
        ns = os.path.basename(path)
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", bridge(tag), check=False)


def sweep():
    """Removes the pods of test processes that are gone (a test killed before its Drop), and
    hosts whose directory is gone with their test's."""
    kill_inits(lambda host_dir: not os.path.exists(
        os.path.join(os.path.dirname(os.path.dirname(host_dir)), "state.json")))
    seen = set()
    for path in glob.glob("/run/netns/%s-*" % PREFIX):
        m = re.match(r"%s-(\d+)-([0-9a-f]+)-h\d+$" % PREFIX, os.path.basename(path))
        if m and not os.path.exists("/proc/" + m.group(1)):
            seen.add((int(m.group(1)), m.group(2)))
    for owner, tag in seen:
        remove(owner, tag)


def init(d, hostname):
    """PID 1 of a host: makes the host's private directories, reaps orphans (the agents
    detach from their ssh session and end up here, as under systemd), and on SIGUSR1 sends
    SIGTERM to every process of the host, as a shutdown does."""
    sh("mount", "--make-rprivate", "/")
    checkout = checkout_hidden()
    if checkout:
        # Kept aside on /mnt (in this mount namespace only) while the private directories
        # go over it, then put back at its own path.
        sh("mount", "--bind", checkout, "/mnt")
    for private, sub in zip(PRIVATE, ("home", "tmp", "vartmp")):
        source = os.path.join(d, sub)
        if checkout and source.startswith(checkout + "/"):
            # Once /tmp is mounted over, a host directory inside the hidden checkout is
            # reachable only through its copy on /mnt.
            source = "/mnt" + source[len(checkout):]
        sh("mount", "--bind", source, private)
    if checkout:
        os.makedirs(checkout, exist_ok=True)
        sh("mount", "--bind", "/mnt", checkout)
        sh("umount", "/mnt")
    sh("mount", "--bind", os.path.join(d, "etc-hosts"), "/etc/hosts")
    socket.sethostname(hostname)

    def shutting_down(*_):
        try:
            os.kill(-1, signal.SIGTERM)
        except OSError:
            pass
    signal.signal(signal.SIGUSR1, shutting_down)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(d, "init.ready"), "w").close()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.2)


def main(argv):
    if argv[:1] == ["setup"]:
        return setup(argv[1], int(argv[2]))
    if argv[:1] == ["teardown"]:
        return teardown(argv[1])
    if argv[:1] == ["sweep"]:
        return sweep()
    if argv[:1] == ["init"]:
        return init(argv[1], argv[2])
    if argv[:1] == ["halt-after"]:
        time.sleep(float(argv[3]))
        return halt(argv[1], int(argv[2]))
    if argv[:1] == ["run"]:
        with open(os.path.join(argv[1], "state.json")) as f:
            emu = json.load(f)["emulate"]
        boot(argv[1], emu, int(argv[2]))
        proc = enter(argv[1], int(argv[2]), "root", ["bash", "-c", argv[3]])
        if proc is None:
            fail("host %s is down" % argv[2])
        return proc.wait()
    fail("usage: hosts.py setup ROOT HOSTS | teardown ROOT | sweep | run ROOT I CMD")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
