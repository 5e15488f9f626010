#!/usr/bin/env python3
"""The chaos soak behind scripts/chaos.sh (see there for how to run it).

Jobs, one after another until DURATION is spent, each an elastic job of AGENTS
agents on 127.0.0.1..N (one worker each, scripts/chaos_worker.py), over c10d or
over a 3-member etcd, alternating. While a job runs, a driver seeded with SEED
injects faults: SIGKILL or SIGSTOP/SIGCONT of a non-host agent, SIGKILL of a
worker, a new agent joining, an etcd member killed and restarted, a node's
network cut for 1-8 s, a worker hang (SIGSTOP: --hang-timeout ends the round
and the job restarts from its checkpoint). After each job it checks the
invariants:

  ranks     every round's ranks are 0..W-1 once each, all with the same W
  orphans   no process outlives its SIGKILLed agent by more than 5 s, and
            none outlives the job's end by more than 5 s (the driver is a
            subreaper: whatever an agent leaves behind comes to it)
  exit      every agent that was not SIGKILLed ends with 0, and the
            checkpoint is at the last step; an agent frozen or cut off past
            the heartbeat may instead leave with 75, the rendezvous' code; a
            node lost while the job is finishing ends it with 75 everywhere
            (docs/elastic.md), counted apart in the summary
  lines     every worker line is whole, numbered 0, 1, 2, ... without a gap
            (agents that were SIGKILLed may lose their last lines: not checked)
  keys      no etcd key is left under the prefix once the job ended

and prints one summary line. A violation keeps the logs (and says where);
the same seed draws the same faults at the same offsets again.

As root with iproute2 (the default then; --no-netns to run without), every
node is a network namespace of its own, 10.233.0.N on a bridge in a hub
namespace that also holds etcd and the driver, so that a node's link can be
cut and restored. Otherwise the nodes are 127.0.0.N and no cut is drawn.
"""

import argparse
import collections
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORPHAN_BOUND = 5.0
LINE = re.compile(r"^\[(\d+)\]: chaos (\d+) pid=(\d+) (start|step|done) round=(\d+) "
                  r"rank=(\d+) world=(\d+) step=(\d+)$")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """Every process under `pid`, from /proc."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children[int(fields[1])].append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_worker(pid):
    """A worker is `python chaos_worker.py ...`; its agent's command line names the
    script too, as its program, so only the interpreter's first argument counts."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        return len(argv) > 1 and argv[1].endswith(b"chaos_worker.py")
    except OSError:
        return False


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def describe(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid} {command[:80]}")
        except OSError:
            out.append(str(pid))
    return "; ".join(out)


def become_subreaper():
    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Network:
    """Nodes 1..N, each a network namespace with a veth to a bridge in the hub
    namespace (this process's own, entered by re-running itself under `ip netns
    exec`), or plain loopback addresses when namespaces are off."""

    HUB_ADDRESS = "10.233.0.254"

    def __init__(self, nodes, hub):
        self.enabled = hub is not None
        self.prefix = hub
        self.nodes = nodes
        if self.enabled:
            run(["ip", "link", "add", "chbr", "type", "bridge"])
            run(["ip", "addr", "add", f"{self.HUB_ADDRESS}/24", "dev", "chbr"])
            run(["ip", "link", "set", "chbr", "up"])
            run(["ip", "link", "set", "lo", "up"])
            for n in range(1, nodes + 1):
                name = f"{self.prefix}-{n}"
                run(["ip", "netns", "add", name])
                run(["ip", "link", "add", f"ch{n}", "type", "veth", "peer", "name", "eth0",
                     "netns", name])
                run(["ip", "link", "set", f"ch{n}", "master", "chbr", "up"])
                run(["ip", "-n", name, "addr", "add", f"10.233.0.{n}/24", "dev", "eth0"])
                run(["ip", "-n", name, "link", "set", "eth0", "up"])
                run(["ip", "-n", name, "link", "set", "lo", "up"])

    def address(self, n):
        return f"10.233.0.{n}" if self.enabled else f"127.0.0.{n}"

    def hub(self):
        return self.HUB_ADDRESS if self.enabled else "127.0.0.1"

    def command(self, n, command):
        """`command` run on node n."""
        return ["ip", "netns", "exec", f"{self.prefix}-{n}"] + command if self.enabled else command

    def set_link(self, n, up):
        run(["ip", "link", "set", f"ch{n}", "up" if up else "down"])


def run(command):
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


class Etcd:
    """A 3-member etcd on loopback, members killed and restarted by index."""

    def __init__(self, directory, host):
        self.dir = directory
        self.host = host
        os.makedirs(directory, exist_ok=True)
        self.members = [{"name": f"m{i}", "client": free_port(), "peer": free_port(), "proc": None}
                        for i in range(3)]
        self.cluster = ",".join(f"{m['name']}=http://{host}:{m['peer']}" for m in self.members)
        for index in range(3):
            self.start(index, "new")
        deadline = time.time() + 30
        while time.time() < deadline and not self.healthy():
            time.sleep(0.2)
        if not self.healthy():
            raise RuntimeError("the 3-member etcd did not come up in 30 s")

    def start(self, index, state="existing"):
        m = self.members[index]
        url = f"http://{self.host}:{m['client']}"
        log = open(os.path.join(self.dir, f"etcd-{m['name']}.log"), "a")
        m["proc"] = subprocess.Popen(
            ["etcd", f"--name={m['name']}", f"--data-dir={self.dir}/{m['name']}",
             f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
             f"--listen-peer-urls=http://{self.host}:{m['peer']}",
             f"--initial-advertise-peer-urls=http://{self.host}:{m['peer']}",
             f"--initial-cluster={self.cluster}", f"--initial-cluster-state={state}",
             "--initial-cluster-token=chaos", "--log-level=error", "--logger=zap"],
            stdout=log, stderr=log)

    def kill(self, index):
        self.members[index]["proc"].kill()
        self.members[index]["proc"].wait()

    def endpoints(self):
        return ",".join(f"{self.host}:{m['client']}" for m in self.members)

    def call(self, path, body):
        for m in self.members:
            if m["proc"].poll() is not None:
                continue
            try:
                request = urllib.request.Request(f"http://{self.host}:{m['client']}{path}",
                                                 data=json.dumps(body).encode())
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return json.load(answer)
            except OSError:
                continue
        raise RuntimeError("no etcd member answers")

    def healthy(self):
        try:
            self.call("/v3/kv/range", {"key": "AA=="})
            return True
        except RuntimeError:
            return False

    def keys(self, prefix):
        import base64
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        answer = self.call("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                            "range_end": base64.b64encode(end.encode()).decode(),
                                            "count_only": True})
        return int(answer.get("count", 0))

    def stop(self):
        for m in self.members:
            if m["proc"] and m["proc"].poll() is None:
                m["proc"].kill()
                m["proc"].wait()


class Job:
    def __init__(self, number, backend, args, etcd, network, directory, rng):
        self.number, self.backend, self.args, self.etcd = number, backend, args, etcd
        self.network = network
        self.dir = directory
        self.rng = rng
        self.checkpoints = os.path.join(directory, "checkpoints")
        os.makedirs(self.checkpoints)
        self.port = free_port()
        self.agents = {}  # node number -> its latest incarnation
        self.incarnations = []  # every agent started: dict(node, addr, proc, log, killed, ...)
        self.faults = collections.Counter()
        self.violations = []
        self.started = time.time()
        self.finished_with_loss = False  # a node lost while finishing: 75 everywhere
        self.fault_log = open(os.path.join(directory, "faults.txt"), "w")

    def note(self, text):
        """One line of faults.txt: what was done to the job, and when."""
        self.fault_log.write(f"{time.time() - self.started:7.2f} {text}\n")
        self.fault_log.flush()

    def endpoint(self):
        if self.backend == "etcd":
            return self.etcd.endpoints()
        return f"{self.network.address(1)}:{self.port}"

    def start_agent(self, node):
        address = self.network.address(node)
        number = len(self.incarnations)
        log = os.path.join(self.dir, f"agent-{number}-{address}.log")
        command = [self.args.ddprun, f"--nnodes=1:{self.args.agents}", "--nproc_per_node=1",
                   f"--rdzv_backend={self.backend}", f"--rdzv_endpoint={self.endpoint()}",
                   f"--rdzv_id=chaos-{self.args.seed}-{self.number}", f"--local_addr={address}",
                   "--max_restarts=1000", "--hang-timeout=10",
                   "--rdzv_conf=heartbeat_timeout=3,exit_barrier_timeout=10,join_timeout=60,"
                   "last_call_timeout=1"
                   + ("" if self.backend == "etcd" else
                      f",is_host={1 if node == 1 else 0}"),
                   sys.executable, os.path.join(ROOT, "scripts", "chaos_worker.py"),
                   self.checkpoints, f"--steps={self.args.steps}", "--step-time=0.05"]
        out = open(log, "w")
        proc = subprocess.Popen(self.network.command(node, command), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        # may_leave: frozen or cut off near or past the heartbeat timeout (3 s), the
        # others may give it up: it then ends with 75 (docs/reliability.md).
        incarnation = {"node": node, "addr": address, "proc": proc, "log": log,
                       "killed": False, "may_leave": False}
        self.agents[node] = incarnation
        self.incarnations.append(incarnation)

    def non_host(self):
        # Over c10d node 1 hosts the store: it is never faulted.
        return [n for n, i in self.agents.items()
                if i["proc"].poll() is None and not (self.backend == "c10d" and n == 1)]

    def workers(self):
        return [p for a in sorted(self.agents)
                for p in descendants(self.agents[a]["proc"].pid) if is_worker(p)]

    def inject(self, kind):
        targets = self.non_host()
        live = [a for a, i in self.agents.items() if i["proc"].poll() is None]
        if kind == "kill_agent" and targets and len(live) > 2:
            victim = self.agents[self.rng.choice(sorted(targets))]
            tree = descendants(victim["proc"].pid)
            victim["killed"] = True
            self.note(f"kill_agent {victim['addr']} (pid {victim['proc'].pid})")
            os.kill(victim["proc"].pid, signal.SIGKILL)
            killed_at = time.time()
            while any(alive(p) for p in tree) and time.time() - killed_at < 30:
                time.sleep(0.05)
            took = time.time() - killed_at
            if took > ORPHAN_BOUND:
                self.violations.append(
                    f"orphans: processes of the agent on {victim['addr']} lived {took:.1f} s "
                    f"after its SIGKILL (bound {ORPHAN_BOUND} s)")
            victim["proc"].wait()
            del self.agents[victim["node"]]
        elif kind == "stop_agent" and targets:
            victim = self.agents[self.rng.choice(sorted(targets))]
            signal_all([victim["proc"].pid] + descendants(victim["proc"].pid), signal.SIGSTOP)
            frozen = self.rng.uniform(0.5, 5)
            victim["may_leave"] |= frozen >= 2
            self.note(f"stop_agent {victim['addr']} for {frozen:.1f} s")
            time.sleep(frozen)
            signal_all([victim["proc"].pid] + descendants(victim["proc"].pid), signal.SIGCONT)
        elif kind == "cut" and targets and self.network.enabled:
            victim = self.agents[self.rng.choice(sorted(targets))]
            cut = self.rng.uniform(1, 8)
            victim["may_leave"] |= cut >= 2
            self.note(f"cut {victim['addr']} for {cut:.1f} s")
            self.network.set_link(victim["node"], False)
            time.sleep(cut)
            self.network.set_link(victim["node"], True)
        elif kind == "kill_worker":
            workers = self.workers()
            if not workers:
                return
            victim = self.rng.choice(workers)
            self.note(f"kill_worker pid {victim}")
            signal_all([victim], signal.SIGKILL)
        elif kind == "join":
            free = [n for n in range(2, self.args.agents + 1)
                    if n not in self.agents or self.agents[n]["proc"].poll() is not None]
            if not free:
                return
            node = self.rng.choice(free)
            self.note(f"join {self.network.address(node)}")
            self.start_agent(node)
        elif kind == "etcd_member" and self.backend == "etcd":
            index = self.rng.randrange(3)
            down = self.rng.uniform(1, 4)
            self.note(f"etcd_member m{index} down for {down:.1f} s")
            self.etcd.kill(index)
            time.sleep(down)
            self.etcd.start(index)
        elif kind == "hang":
            workers = self.workers()
            if not workers:
                return
            victim = self.rng.choice(workers)
            self.note(f"hang pid {victim}")
            signal_all([victim], signal.SIGSTOP)
        else:
            return
        self.faults[kind] += 1

    def run(self, until):
        for n in range(1, self.args.agents + 1):
            self.start_agent(n)
        kinds = ["kill_agent", "stop_agent", "kill_worker", "join", "join"]
        if self.network.enabled:
            kinds.append("cut")
        if self.backend == "etcd":
            kinds.append("etcd_member")
        # A hang (--hang-timeout=10) ends the round, a restart: one job in four gets one.
        hang_at = time.time() + 40 if self.rng.random() < 0.25 else None
        next_fault = time.time() + self.rng.uniform(2, 6)
        while any(i["proc"].poll() is None for i in self.agents.values()):
            now = time.time()
            if now >= until:
                break  # no more faults: the job runs to its end
            if any(i["proc"].poll() == 0 for i in self.incarnations):
                # The job has ended: an agent arriving now (its keys gone) starts a new
                # job under the same id, as a rerun of the command line does (etcd.md).
                break
            if hang_at and now >= hang_at:
                self.inject("hang")
                hang_at = None
            elif now >= next_fault:
                self.inject(self.rng.choice(kinds))
                next_fault = time.time() + self.rng.uniform(2, 6)
            time.sleep(0.1)
        self.finish()

    def finish(self):
        # Every agent that was not SIGKILLed, the ones that left early included.
        ended = [i for i in self.incarnations if not i["killed"]]
        for incarnation in ended:
            try:
                incarnation["code"] = incarnation["proc"].wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.violations.append(f"exit: the agent on {incarnation['addr']} still runs "
                                       f"300 s on")
                os.killpg(incarnation["proc"].pid, signal.SIGKILL)
                incarnation["code"] = incarnation["proc"].wait()
        expected = 0
        # A node lost once the job is finishing (a node's workers all succeeded) fails
        # the job everywhere with 75, naming it (docs/elastic.md: membership is frozen
        # then, and ddprun cannot tell whether the lost node's workers had finished):
        # no false success either way, so that end is accepted too.
        finishing = "while the job was finishing"
        lost_finishing = all(i["code"] == 75 and finishing in read(i["log"])
                             for i in ended if not i["may_leave"] and i["code"] != 0)
        if lost_finishing and any(i["code"] == 75 for i in ended if not i["may_leave"]):
            self.finished_with_loss = True
            expected = 75
        if not any(i["code"] == expected for i in ended):
            self.violations.append(f"exit: no agent ended the job with {expected}")
        for incarnation in ended:
            code = incarnation["code"]
            # An agent that arrived as the job ended never joins a round: over c10d the
            # store went with its host (75, "cannot connect to the rendezvous store").
            log = read(incarnation["log"])
            late = (code == 75 and "cannot connect to the rendezvous store" in log
                    and not re.search(r"^ddprun: round \d+:", log, re.MULTILINE))
            if code not in (expected, 0 if expected == 75 else expected) and not late and \
                    not (incarnation["may_leave"] and code == 75):
                self.violations.append(f"exit: the agent on {incarnation['addr']} "
                                       f"({os.path.basename(incarnation['log'])}) exited {code}, "
                                       f"expected {expected}")
        self.check_orphans()
        try:
            with open(os.path.join(self.checkpoints, "checkpoint.json")) as f:
                step = json.load(f)["step"]
        except (OSError, ValueError, KeyError):
            step = -1
        if expected == 0 and step != self.args.steps:  # a success did all its steps
            self.violations.append(f"exit: success at checkpoint step {step} of "
                                   f"{self.args.steps}")
        self.check_lines()
        if self.backend == "etcd":
            # The last agent out deletes them; where an agent died just before the end
            # (its liveness key still there), they go with the job's lease: 2 x
            # heartbeat_timeout + exit_barrier_timeout = 16 s.
            deadline = time.time() + 16 + 5
            while self.etcd.keys("/ddprun/") and time.time() < deadline:
                time.sleep(0.5)
            left = self.etcd.keys("/ddprun/")
            if left:
                self.violations.append(f"keys: {left} etcd keys left under /ddprun/ 21 s "
                                       f"after the end")

    def check_orphans(self):
        """Once every agent has ended, nothing of the job may stay: what an agent left
        behind was reparented to this process (a subreaper)."""
        etcd = {m["proc"].pid for m in self.etcd.members} if self.etcd else set()
        agents = {i["proc"].pid for i in self.incarnations}
        ended_at = time.time()
        while True:
            left = []
            for pid in descendants(os.getpid()):
                if pid in etcd:
                    continue
                if alive(pid):
                    left.append(pid)
                elif pid not in agents:  # an orphan's zombie, ours to reap
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
            if not left or time.time() - ended_at > ORPHAN_BOUND:
                break
            time.sleep(0.1)
        if left:
            self.violations.append(f"orphans: {len(left)} process(es) of the job still ran "
                                   f"{ORPHAN_BOUND} s after its end: {describe(left)}")
            signal_all(left, signal.SIGKILL)

    def check_lines(self):
        rounds = collections.defaultdict(dict)  # round -> rank -> world
        for incarnation in self.incarnations:
            with open(incarnation["log"], errors="replace") as f:
                lines = f.read().splitlines()
            sequence = {}
            for line in lines:
                if " chaos " not in line:
                    continue
                match = LINE.match(line)
                if not match:
                    self.violations.append(f"lines: a mixed or cut line in {incarnation['log']}: "
                                           f"{line[:120]!r}")
                    continue
                prefix, seq, pid, what, round_, rank, world, _ = match.groups()
                if prefix != rank:
                    self.violations.append(f"lines: rank {rank}'s line under [{prefix}]")
                if not incarnation["killed"] and int(seq) != sequence.get(pid, -1) + 1:
                    self.violations.append(f"lines: pid {pid} line {seq} after "
                                           f"{sequence.get(pid, -1)} in {incarnation['log']}")
                sequence[pid] = int(seq)
                if what == "start":
                    seen = rounds[int(round_)]
                    if int(rank) in seen:
                        self.violations.append(f"ranks: rank {rank} twice in round {round_}")
                    seen[int(rank)] = int(world)
        for round_, ranks in sorted(rounds.items()):
            worlds = set(ranks.values())
            if len(worlds) != 1:
                self.violations.append(f"ranks: round {round_} has world sizes {sorted(worlds)}")
                continue
            world = worlds.pop()
            if any(rank >= world for rank in ranks):
                self.violations.append(f"ranks: round {round_}: ranks {sorted(ranks)} of {world}")

    def kill_all(self):
        for incarnation in self.incarnations:
            if incarnation["proc"].poll() is None:
                try:
                    os.killpg(incarnation["proc"].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                incarnation["proc"].wait()


def in_namespaces(args):
    """Runs this driver again inside a hub network namespace of its own (see Network),
    and removes every namespace it made once that run ends, however it ends."""
    hub = f"ddprun-chaos-{os.getpid()}"
    run(["ip", "netns", "add", hub])
    try:
        command = ["ip", "netns", "exec", hub, sys.executable, os.path.abspath(__file__),
                   *sys.argv[1:], f"--hub={hub}"]
        if "--seed" not in sys.argv[1:]:
            command.append(f"--seed={args.seed}")  # the inner run draws the same one
        child = subprocess.Popen(command)  # `ip netns exec` execs: this is the driver
        # A stop reaches the inner driver, which ends its jobs and etcd before it exits.
        for stop in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop, lambda *_: child.send_signal(signal.SIGTERM))
        return child.wait()
    finally:
        for name in os.listdir("/run/netns"):
            if name == hub or name.startswith(hub + "-"):
                subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--backend", choices=["c10d", "etcd", "both"], default="both")
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "ddprun"))
    parser.add_argument("--keep", action="store_true", help="keep the logs even when clean")
    parser.add_argument("--no-netns", action="store_true",
                        help="nodes on 127.0.0.N, no network cuts (the default when not root)")
    parser.add_argument("--hub", help=argparse.SUPPRESS)  # set by in_namespaces()
    args = parser.parse_args()
    # Stopped by a signal (even one a background shell made it ignore), it still
    # cleans up: SystemExit runs every finally below.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.ddprun = os.path.abspath(args.ddprun)
    if shutil.which("etcd") is None and args.backend != "c10d":
        sys.exit("chaos: etcd is not installed (Debian's etcd-server; scripts/install-deps.sh)")
    if args.hub is None and not args.no_netns and os.geteuid() == 0 and shutil.which("ip"):
        return in_namespaces(args)
    if args.hub is None:
        print("chaos: nodes on 127.0.0.N without network cuts (needs root and iproute2, "
              "or --no-netns was given)", flush=True)
    become_subreaper()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix=f"ddprun-chaos-{args.seed}-")
    network = Network(args.agents, args.hub)
    etcd = Etcd(os.path.join(work, "etcd"), network.hub()) if args.backend != "c10d" else None
    start = time.time()
    faults = collections.Counter()
    violations = []
    ends = collections.Counter()  # jobs by how they ended: 0, or 75 for a loss while finishing
    jobs = 0
    try:
        while time.time() - start < args.duration:
            backend = (["c10d", "etcd"][jobs % 2] if args.backend == "both" else args.backend)
            directory = os.path.join(work, f"job{jobs}")
            os.makedirs(directory)
            job = Job(jobs, backend, args, etcd, network, directory, rng)
            try:
                # Each job gets a slice of the time left, a minute at least.
                job.run(until=min(start + args.duration, time.time() + max(60, args.duration / 4)))
            finally:
                job.kill_all()
            faults.update(job.faults)
            ends[75 if job.finished_with_loss else 0] += 1
            for violation in job.violations:
                violations.append(f"job {jobs} ({backend}): {violation}")
                print(f"chaos: VIOLATION job {jobs} ({backend}): {violation}", flush=True)
            jobs += 1
    except SystemExit:
        stopped = True  # a signal: the summary of the jobs that ended, and the logs
        violations.append("stopped by a signal")
    else:
        stopped = False
    finally:
        if etcd:
            etcd.stop()
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items()))
    print(f"chaos: seed {args.seed}, {time.time() - start:.0f} s, {jobs} jobs"
          f"{' (stopped)' if stopped else ''}, "
          f"{args.agents} agents{', network namespaces' if network.enabled else ''}, "
          f"faults: {counts or 'none'}; ended 0: {ends[0]}, 75 (a node lost while "
          f"finishing): {ends[75]}; violations: {len(violations) - stopped}"
          + (f"; logs in {work}" if violations or args.keep else ""), flush=True)
    if not violations and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 143 if stopped else 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
