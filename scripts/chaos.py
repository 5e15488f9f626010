#!/usr/bin/env python3
"""The chaos soak behind scripts/chaos.sh (see there for how to run it).

Jobs, one after another until DURATION is spent, each an elastic job of AGENTS
agents on 127.0.0.1..N (one worker each, scripts/chaos_worker.py), over c10d or
over a 3-member etcd, alternating. While a job runs, a driver seeded with SEED
injects faults: SIGKILL or SIGSTOP/SIGCONT of a non-host agent, SIGKILL of a
worker, a new agent joining, an etcd member killed and restarted, a worker
hang (SIGSTOP: --hang-timeout stops the job, exit 124). After each job it
checks the invariants:

  ranks     every round's ranks are 0..W-1 once each, all with the same W
  orphans   no process outlives its SIGKILLed agent by more than 5 s
  exit      every agent still running ends with the same code: 124 after a
            hang, else 0 (and then the checkpoint is at the last step)
  lines     every worker line is whole, numbered 0, 1, 2, ... without a gap
            (agents that were SIGKILLed may lose their last lines: not checked)
  keys      no etcd key is left under the prefix once the job ended

and prints one summary line. A violation keeps the logs (and says where);
the same seed draws the same faults at the same offsets again.
"""

import argparse
import collections
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
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"chaos_worker" in f.read()
    except OSError:
        return False


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Etcd:
    """A 3-member etcd on loopback, members killed and restarted by index."""

    def __init__(self, directory):
        self.dir = directory
        self.members = [{"name": f"m{i}", "client": free_port(), "peer": free_port(), "proc": None}
                        for i in range(3)]
        self.cluster = ",".join(f"{m['name']}=http://127.0.0.1:{m['peer']}" for m in self.members)
        for index in range(3):
            self.start(index, "new")
        deadline = time.time() + 30
        while time.time() < deadline and not self.healthy():
            time.sleep(0.2)
        if not self.healthy():
            raise RuntimeError("the 3-member etcd did not come up in 30 s")

    def start(self, index, state="existing"):
        m = self.members[index]
        url = f"http://127.0.0.1:{m['client']}"
        log = open(os.path.join(self.dir, f"etcd-{m['name']}.log"), "a")
        m["proc"] = subprocess.Popen(
            ["etcd", f"--name={m['name']}", f"--data-dir={self.dir}/{m['name']}",
             f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
             f"--listen-peer-urls=http://127.0.0.1:{m['peer']}",
             f"--initial-advertise-peer-urls=http://127.0.0.1:{m['peer']}",
             f"--initial-cluster={self.cluster}", f"--initial-cluster-state={state}",
             "--initial-cluster-token=chaos", "--log-level=error", "--logger=zap"],
            stdout=log, stderr=log)

    def kill(self, index):
        self.members[index]["proc"].kill()
        self.members[index]["proc"].wait()

    def endpoints(self):
        return ",".join(f"127.0.0.1:{m['client']}" for m in self.members)

    def call(self, path, body):
        for m in self.members:
            if m["proc"].poll() is not None:
                continue
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{m['client']}{path}",
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
    def __init__(self, number, backend, args, etcd, directory, rng):
        self.number, self.backend, self.args, self.etcd = number, backend, args, etcd
        self.dir = directory
        self.rng = rng
        self.checkpoints = os.path.join(directory, "checkpoints")
        os.makedirs(self.checkpoints)
        self.port = free_port()
        self.agents = {}  # address -> the running incarnation
        self.incarnations = []  # every agent started: dict(addr, proc, log, killed)
        self.faults = collections.Counter()
        self.violations = []
        self.hung = False

    def endpoint(self):
        return self.etcd.endpoints() if self.backend == "etcd" else f"127.0.0.1:{self.port}"

    def start_agent(self, address):
        number = len(self.incarnations)
        log = os.path.join(self.dir, f"agent-{number}-{address}.log")
        command = [self.args.ddprun, f"--nnodes=1:{self.args.agents}", "--nproc_per_node=1",
                   f"--rdzv_backend={self.backend}", f"--rdzv_endpoint={self.endpoint()}",
                   f"--rdzv_id=chaos-{self.args.seed}-{self.number}", f"--local_addr={address}",
                   "--max_restarts=1000", "--hang-timeout=10",
                   "--rdzv_conf=heartbeat_timeout=3,exit_barrier_timeout=10,join_timeout=60,"
                   "last_call_timeout=1"
                   + ("" if self.backend == "etcd" else
                      f",is_host={1 if address == '127.0.0.1' else 0}"),
                   sys.executable, os.path.join(ROOT, "scripts", "chaos_worker.py"),
                   self.checkpoints, f"--steps={self.args.steps}", "--step-time=0.05"]
        out = open(log, "w")
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        incarnation = {"addr": address, "proc": proc, "log": log, "killed": False,
                       "thawed": False}
        self.agents[address] = incarnation
        self.incarnations.append(incarnation)

    def non_host(self):
        # Over c10d 127.0.0.1 hosts the store: it is never faulted.
        return [a for a, i in self.agents.items()
                if i["proc"].poll() is None and not (self.backend == "c10d" and a == "127.0.0.1")]

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
            del self.agents[victim["addr"]]
        elif kind == "stop_agent" and targets:
            victim = self.agents[self.rng.choice(sorted(targets))]
            signal_all([victim["proc"].pid] + descendants(victim["proc"].pid), signal.SIGSTOP)
            frozen = self.rng.uniform(0.5, 5)
            # Frozen near the heartbeat timeout (3 s) or past it, the others may give it
            # up: it then ends with 75 (docs/reliability.md), the job without it.
            victim["thawed"] = frozen >= 2
            time.sleep(frozen)
            signal_all([victim["proc"].pid] + descendants(victim["proc"].pid), signal.SIGCONT)
        elif kind == "kill_worker":
            workers = self.workers()
            if not workers:
                return
            signal_all([self.rng.choice(workers)], signal.SIGKILL)
        elif kind == "join":
            free = [f"127.0.0.{n}" for n in range(2, self.args.agents + 1)
                    if f"127.0.0.{n}" not in self.agents]
            if not free:
                return
            self.start_agent(self.rng.choice(free))
        elif kind == "etcd_member" and self.backend == "etcd":
            index = self.rng.randrange(3)
            self.etcd.kill(index)
            time.sleep(self.rng.uniform(1, 4))
            self.etcd.start(index)
        elif kind == "hang":
            workers = self.workers()
            if not workers:
                return
            signal_all([self.rng.choice(workers)], signal.SIGSTOP)
            self.hung = True
        else:
            return
        self.faults[kind] += 1

    def run(self, until):
        for n in range(1, self.args.agents + 1):
            self.start_agent(f"127.0.0.{n}")
        kinds = ["kill_agent", "stop_agent", "kill_worker", "join", "join"]
        if self.backend == "etcd":
            kinds.append("etcd_member")
        # A hang ends the job (exit 124): one job in four gets one, late.
        hang_at = time.time() + 40 if self.rng.random() < 0.25 else None
        next_fault = time.time() + self.rng.uniform(2, 6)
        while any(i["proc"].poll() is None for i in self.agents.values()):
            now = time.time()
            if now >= until and not self.hung:
                break  # no more faults: the job runs to its end
            if hang_at and now >= hang_at and not self.hung:
                self.inject("hang")
            elif now >= next_fault and not self.hung:
                self.inject(self.rng.choice(kinds))
                next_fault = time.time() + self.rng.uniform(2, 6)
            time.sleep(0.1)
        self.finish()

    def finish(self):
        codes = {}
        for address, incarnation in self.agents.items():
            try:
                codes[address] = incarnation["proc"].wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.violations.append(f"exit: the agent on {address} still runs 300 s on")
                os.killpg(incarnation["proc"].pid, signal.SIGKILL)
                codes[address] = incarnation["proc"].wait()
        expected = 124 if self.hung else 0
        if not codes:
            self.violations.append("exit: no agent was left to end the job")
        for address, code in sorted(codes.items()):
            if code != expected and not (self.agents[address]["thawed"] and code == 75):
                self.violations.append(f"exit: the agent on {address} exited {code}, "
                                       f"expected {expected}")
        if not self.hung:
            try:
                with open(os.path.join(self.checkpoints, "checkpoint.json")) as f:
                    step = json.load(f)["step"]
            except (OSError, ValueError, KeyError):
                step = -1
            if step != self.args.steps:
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--backend", choices=["c10d", "etcd", "both"], default="both")
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "ddprun"))
    parser.add_argument("--keep", action="store_true", help="keep the logs even when clean")
    args = parser.parse_args()
    if shutil.which("etcd") is None and args.backend != "c10d":
        sys.exit("chaos: etcd is not installed (Debian's etcd-server; scripts/install-deps.sh)")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix=f"ddprun-chaos-{args.seed}-")
    etcd = Etcd(os.path.join(work, "etcd")) if args.backend != "c10d" else None
    start = time.time()
    faults = collections.Counter()
    violations = []
    jobs = 0
    try:
        while time.time() - start < args.duration:
            backend = (["c10d", "etcd"][jobs % 2] if args.backend == "both" else args.backend)
            directory = os.path.join(work, f"job{jobs}")
            os.makedirs(directory)
            job = Job(jobs, backend, args, etcd, directory, rng)
            try:
                # Each job gets a slice of the time left, a minute at least.
                job.run(until=min(start + args.duration, time.time() + max(60, args.duration / 4)))
            finally:
                job.kill_all()
            faults.update(job.faults)
            for violation in job.violations:
                violations.append(f"job {jobs} ({backend}): {violation}")
                print(f"chaos: VIOLATION job {jobs} ({backend}): {violation}", flush=True)
            jobs += 1
    finally:
        if etcd:
            etcd.stop()
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items()))
    print(f"chaos: seed {args.seed}, {time.time() - start:.0f} s, {jobs} jobs, "
          f"{args.agents} agents, faults: {counts or 'none'}; violations: {len(violations)}"
          + (f"; logs in {work}" if violations or args.keep else ""), flush=True)
    if not violations and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
