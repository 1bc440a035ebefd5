"""The bench on real hosts (`bench gather --hosts`) and `gridsplit run`'s launchers.

The real-host path is tested as netcheck's --hosts is: the hosts are lab
namespaces, each running its own ssh server (dropbear, in a private mount and
UTS namespace where /root is a throw-away home holding this test's key and
the host has its own name), and every ssh of the bench starts inside a lab
host, so its traffic stays in the lab. The MPI launcher then runs on the root
rank's host and reaches the other one with its own ssh, as on a real grid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PREFIX, dropbear_hosts, gridsplit, needs_root

ROOT = Path(__file__).parent.parent


def one_line_error(cp: subprocess.CompletedProcess, expect: str) -> None:
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert expect in cp.stderr, cp.stderr
    assert "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


# ---------------------------------------------------------------------------
# Bad input (no lab)
# ---------------------------------------------------------------------------

GOOD = ('topology = "mini"\n[ssh]\nconnect_timeout = 2\nssh_port = 1\n'
        '[[site]]\nname = "east"\nhosts = ["127.0.0.1"]\n[[site]]\nname = "west"\nhosts = ["127.0.0.2"]\n')


@pytest.mark.parametrize("text,args,expect", [
    ("[[site]\nname = 1", [], "not valid TOML"),
    ('topology = "mini"\n[[site]]\nname = "east"\nhosts = ["a"]\n[[site]]\nname = "west"\nhosts = []\n', [],
     "site[1].hosts: give one or more hosts (site 'west' has no nodes)"),
    ('topology = "mini"\n[mpi]\nimpl = "lam"\n' + GOOD.split("\n", 1)[1], [], "mpi.impl"),
    ('[[site]]\nname = "east"\nhosts = ["a"]\n[[site]]\nname = "west"\nhosts = ["b"]\n', [], 'topology = "FILE"'),
    (GOOD.replace('"west"', '"north"'), [], "site north is not a site of topology 'mini'"),
    (GOOD, ["--strategy", "fifo"], "--strategy: with --hosts the gateways run"),
    (GOOD, ["--topology", "paper"], "--hosts and --topology exclude each other"),
    (GOOD.replace("[ssh]", '[mpi]\nimpl = ["openmpi"]\n[ssh]'), ["--impl", "mpich"], "not installed on the hosts"),
    # Nothing listens on port 1 of loopback: ssh is refused at once.
    (GOOD, [], "127.0.0.1 (site east) does not answer ssh: ssh failed"),
])
def test_bad_hosts_file_is_one_line(tmp_path, text, args, expect):
    f = tmp_path / "hosts.toml"
    f.write_text(text)
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "bench", "gather", "--hosts", str(f), "--nodes", "1",
                         "--sizes", "1K", "--out", str(tmp_path / "x.jsonl"), *args],
                        text=True, capture_output=True, cwd=ROOT, timeout=60)
    one_line_error(cp, expect)


def test_run_gives_srun_tasks_the_library_not_srun(tmp_path):
    # A stand-in srun (Slurm need not be installed) that prints its own environment and arguments.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/sh\necho "srun LD_PRELOAD=${LD_PRELOAD-unset} '
                                 'GRIDSPLIT_CONFIG=${GRIDSPLIT_CONFIG-unset}"\nfor a in "$@"; do echo "arg $a"; done\n')
    (bindir / "srun").chmod(0o755)
    conf = tmp_path / "nodes.conf"
    conf.write_text("gridsplit-nodes 1\nsite a 10.0.1.0/24 10.0.1.254:7100\nsite b 10.0.2.0/24 10.0.2.254:7100\n")
    lib = tmp_path / "lib.so"
    lib.write_text("")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    env.pop("SLURM_EXPORT_ENV", None)

    def run(*cmd: str, extra: dict | None = None) -> list[str]:
        cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib", str(lib),
                             "--split", "all", "--", *cmd], text=True, capture_output=True, cwd=ROOT, timeout=60,
                            env={**env, **(extra or {})})
        assert cp.returncode == 0, cp.stderr
        assert "tasks of srun get LD_PRELOAD" in cp.stderr
        return cp.stdout.splitlines()

    ours = f"LD_PRELOAD={lib},GRIDSPLIT_CONFIG={conf},GRIDSPLIT_SPLIT=all"
    out = run("srun", "-N", "2", "-n", "4", "./app", "-x")
    assert out[0] == "srun LD_PRELOAD=unset GRIDSPLIT_CONFIG=unset"   # srun itself runs without them
    assert out[1:] == [f"arg --export=ALL,{ours}", "arg -N", "arg 2", "arg -n", "arg 4", "arg ./app", "arg -x"]
    # The job's own --export is merged, not repeated; NONE keeps only ours (and SLURM_*).
    out = run("srun", "--export=HOME,FOO=1", "-n", "2", "./app")
    assert out[1:3] == [f"arg --export=HOME,FOO=1,{ours}", "arg -n"]
    out = run("srun", "--export", "NONE", "./app")
    assert out[1:] == [f"arg --export={ours}", "arg ./app"]
    out = run("srun", "./app", extra={"SLURM_EXPORT_ENV": "PATH"})
    assert out[1] == f"arg --export=PATH,{ours}"
    # --dry-run shows the command line and runs nothing.
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib", str(lib),
                         "--dry-run", "--", "srun", "-n", "2", "./app"], text=True, capture_output=True, cwd=ROOT,
                        timeout=60, env=env)
    assert cp.returncode == 0 and cp.stdout.startswith("srun --export=ALL,LD_PRELOAD="), cp.stdout + cp.stderr
    assert "GRIDSPLIT_SPLIT=policy ./app" in cp.stdout.replace("-n 2 ", "")
    # The host rule: names resolved here to addresses (the library compares addresses); a name that
    # does not resolve, or another word, is one line.
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib", str(lib),
                         "--split", "hosts:localhost+127.0.0.1", "--dry-run", "--", "srun", "./app"], text=True,
                        capture_output=True, cwd=ROOT, timeout=60, env=env)
    assert cp.returncode == 0 and "GRIDSPLIT_SPLIT=hosts:127.0.0.1 ./app" in cp.stdout, cp.stdout + cp.stderr
    # root: rank 0's host, the first of srun's node list (a Slurm hostlist) or of the launcher's hostfile
    # (the application's own -f after the program is not read); a command naming no host is one line.
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib", str(lib),
                         "--split", "root", "--dry-run", "--", "srun", "./app"], text=True, capture_output=True,
                        cwd=ROOT, timeout=60, env={**env, "SLURM_JOB_NODELIST": "localhost,n[01-03]"})
    assert cp.returncode == 0 and "GRIDSPLIT_SPLIT=hosts:127.0.0.1 ./app" in cp.stdout, cp.stdout + cp.stderr
    assert "rank 0's host is localhost (SLURM_JOB_NODELIST)" in cp.stderr
    (tmp_path / "hostfile").write_text("# ours\n\n127.0.0.1:4\nfar-node:4\n")
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib", str(lib),
                         "--split", "root", "--dry-run", "--", "mpiexec.mpich", "-n", "8", "-f",
                         str(tmp_path / "hostfile"), "true", "-f", "/nonexistent"], text=True, capture_output=True,
                        cwd=ROOT, timeout=60, env=env)
    assert cp.returncode == 0 and "-genv GRIDSPLIT_SPLIT hosts:127.0.0.1 -n 8" in cp.stdout, cp.stdout + cp.stderr
    for bad, expect in (("hosts:gs-no-such-host.invalid", "host 'gs-no-such-host.invalid' does not resolve"),
                        ("hosts:", "give policy, all, root, or hosts:HOST[+HOST...]"),
                        ("root", "--split root: the command names no hosts")):
        one_line_error(subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--lib",
                                       str(lib), "--split", bad, "--", "srun", "./app"], text=True,
                                      capture_output=True, cwd=ROOT, timeout=60, env=env), expect)


@pytest.fixture()
def slurm(tmp_path):
    """A one-node Slurm (munged, slurmctld, slurmd) of this test's own: its config, munge socket,
    state and free loopback ports under tmp_path, found by SLURM_CONF. Stopped by PID."""
    import shutil
    import socket
    if os.geteuid() != 0 or not all(shutil.which(x) for x in ("munged", "slurmctld", "slurmd", "srun")):
        pytest.skip("a real Slurm needs root and Debian's slurm-wlm (the srun command line is tested without it)")
    d = tmp_path / "slurm"
    (d / "munge").mkdir(parents=True, mode=0o700)
    key = d / "munge" / "key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    host = socket.gethostname()
    conf = d / "slurm.conf"
    conf.write_text(
        f"ClusterName=gsh\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ports[0]}\nSlurmdPort={ports[1]}\n"
        f"AuthType=auth/munge\nAuthInfo=socket={d}/munge/sock\nCredType=cred/munge\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_CPU\nSlurmUser=root\nSlurmdUser=root\nMpiDefault=none\nReturnToService=2\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        f"StateSaveLocation={d}\nSlurmdSpoolDir={d}\nSlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/d.pid\n"
        f"SlurmctldLogFile={d}/ctld.log\nSlurmdLogFile={d}/d.log\n"
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n"
        "PartitionName=t Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pidfiles = [d / "d.pid", d / "ctld.pid", d / "munge" / "pid"]
    try:
        subprocess.run(["munged", "-f", "-S", f"{d}/munge/sock", f"--key-file={key}", f"--log-file={d}/munge/log",
                        f"--pid-file={d}/munge/pid", f"--seed-file={d}/munge/seed"], check=True, timeout=30)
        subprocess.run(["slurmctld", "-c"], env=env, check=True, timeout=30)
        subprocess.run(["slurmd"], env=env, check=True, timeout=30)
        for _ in range(120):
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, text=True, capture_output=True).stdout
            if state.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"slurmd did not come up: {(d / 'd.log').read_text()[-500:]}")
        yield env
    finally:
        for f in pidfiles:
            try:
                os.kill(int(f.read_text()), 15)
            except (OSError, ValueError):
                pass
            time.sleep(0.5)


def test_run_through_real_srun(slurm, tmp_path):
    # The tasks get the library and the node file; the step daemon that starts them (and srun) does not.
    conf = tmp_path / "nodes.conf"
    conf.write_text("gridsplit-nodes 1\nsite a 10.99.1.0/24 10.99.1.254:7100\nsite b 10.99.2.0/24 10.99.2.254:7100\n")
    show = ('echo "task $SLURM_PROCID ${LD_PRELOAD##*/} ${GRIDSPLIT_CONFIG##*/} $GRIDSPLIT_SPLIT '
            'parent=$(tr "\\0" "\\n" < /proc/$PPID/environ | grep -c ^LD_PRELOAD=)"')
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "run", "--config", str(conf), "--", "srun", "-n", "2",
                         "--export=HOME,PATH", "sh", "-c", show], text=True, capture_output=True, cwd=ROOT,
                        timeout=120, env=slurm)
    assert sorted(cp.stdout.splitlines()) == [f"task {i} libgridsplit.so nodes.conf policy parent=0" for i in (0, 1)], \
        cp.stdout + cp.stderr


def test_job_command_lines_give_the_split_env_to_ranks_only(tmp_path):
    from gridsplit.bench.hosts import RemoteHost, job_argv
    from gridsplit.inventory import load_inventory
    f = tmp_path / "hosts.toml"
    f.write_text(GOOD.replace("[ssh]", '[mpi]\nrsh = ["ssh", "-p", "2222"]\nmpich = "mpiexec.hydra"\n[ssh]'))
    inv = load_inventory(str(f))
    hosts = [RemoteHost(e.name, s.name, "node", e, 100.0) for s in inv.sites for e in s.hosts]
    env = {"LD_PRELOAD": "/lib/gs.so", "GRIDSPLIT_CONFIG": "/etc/n.conf"}
    ompi = job_argv(inv, "openmpi", hosts, ["/bin/prog", "-s", "1"], env, 3, "/tmp/w")
    assert ompi[:6] == ["mpirun", "--allow-run-as-root", "--map-by", "node", "--host", "127.0.0.1,127.0.0.2"]
    assert "--oversubscribe" in ompi and ompi[ompi.index("--wdir") + 1] == "/tmp/w"
    assert ompi[ompi.index("plm_rsh_agent") + 1] == "ssh -p 2222"
    assert ompi[-7:] == ["-x", "LD_PRELOAD=/lib/gs.so", "-x", "GRIDSPLIT_CONFIG=/etc/n.conf", "/bin/prog", "-s", "1"]
    with pytest.raises(Exception, match="hydra runs one program as its ssh"):
        job_argv(inv, "mpich", hosts, ["/bin/prog"], env, 2)
    f.write_text(GOOD.replace("[ssh]", '[mpi]\nmpich = "mpiexec.hydra"\n[ssh]'))
    inv = load_inventory(str(f))
    assert job_argv(inv, "mpich", hosts, ["/bin/prog"], env, 2) == [
        "mpiexec.hydra", "-launcher", "ssh", "-launcher-exec", "ssh", "-hosts", "127.0.0.1,127.0.0.2", "-n", "2",
        "-genv", "LD_PRELOAD", "/lib/gs.so", "-genv", "GRIDSPLIT_CONFIG", "/etc/n.conf", "/bin/prog"]


# ---------------------------------------------------------------------------
# A real lab's hosts over ssh
# ---------------------------------------------------------------------------

HOSTS = {"east-1": "10.71.1.1", "west-1": "10.71.2.1", "east-gw": "10.71.1.254", "west-gw": "10.71.2.254"}


@pytest.fixture(scope="module")
def sshd_lab(lab, tmp_path_factory):
    """The mini lab with an ssh server on one node per site and on both gateways. Stopped by PID."""
    needs_root()
    with dropbear_hosts(tmp_path_factory.mktemp("sshd"), HOSTS) as key:
        yield key


def hosts_file(tmp_path: Path, key: Path, east: str = HOSTS["east-1"], extra: str = "", east_extra: str = "",
               impl: str = "openmpi") -> Path:
    from gridsplit.lab.names import LabNames
    state_dir = LabNames.from_env().state_dir
    f = tmp_path / "hosts.toml"
    f.write_text(
        'topology = "mini"\n'
        f'[ssh]\ncommand = ["ip", "netns", "exec", "{PREFIX}-east-1", "ssh"]\nuser = "root"\nconnect_timeout = 3\n'
        f'options = ["-i", "{key}", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", '
        '"-o", "LogLevel=ERROR"]\n'
        f'[mpi]\nimpl = ["{impl}"]\nopenmpi = "mpirun.openmpi"\nmpich = "mpiexec.mpich"\ntcp_if_include = "10.71.0.0/16"\n'
        f'nodes_config = "{state_dir / "nodes.conf"}"\n{extra}'
        f'[[site]]\nname = "east"\nhosts = ["{east}"]\ngateway = "{HOSTS["east-gw"]}"\n{east_extra}'
        f'[[site]]\nname = "west"\nhosts = ["{HOSTS["west-1"]}"]\ngateway = "{HOSTS["west-gw"]}"\n')
    return f


@pytest.mark.lab
def test_gather_on_hosts_over_ssh_direct_and_split(sshd_lab, tmp_path):
    out = tmp_path / "g.jsonl"
    cp = gridsplit("bench", "gather", "--hosts", str(hosts_file(tmp_path, sshd_lab)), "--nodes", "1",
                   "--sizes", "1M", "--reps", "5", "--budget", "0", "--rank-env", "OMPI_MCA_mpi_yield_when_idle=1",
                   "--out", str(out), timeout=300)
    assert (tmp_path / "g" / "index.html").exists(), cp.stdout   # the report reads real-host rows too
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    meta, points = rows[0], [r for r in rows if r["kind"] == "point"]
    assert [r["mode"] for r in points] == ["direct", "split"], cp.stdout
    # The machine facts of every host, read over ssh: each namespace has its own name here.
    facts = meta["hosts"]["facts"]
    assert {facts[a]["hostname"] for a in HOSTS.values()} == set(HOSTS)
    assert all(facts[a]["cores"] and facts[a]["kernel"] for a in HOSTS.values())
    assert {s: g["gateway"] for s, g in meta["hosts"]["gateways"].items()} == {"east": HOSTS["east-gw"],
                                                                               "west": HOSTS["west-gw"]}
    assert meta["topology_spec"] == "mini" and meta["hosts"]["file"].endswith("hosts.toml")
    for r in points:
        assert r["reps"] == 5 and r["total_s"] > 0 and r["nodes"] == 1 and r["ranks"] == 2
        assert r["counters"]["attribution"] == "role" and set(r["counters"]["by_host"]) <= set(HOSTS.values())
        assert "drops" not in r and r["bound_per_rep_s"] > 0.01
    direct, split = points
    # Split mode went through the gateways (the ranks loaded the library over ssh): they sent
    # the 1 MB messages on (direct: only the bench's own ssh sessions), and gridsplitd's CPU
    # was read on each gateway host.
    sent = {m: sum(r["counters"]["by_host"].get(HOSTS[g], {}).get("OutSegs", 0) for g in ("east-gw", "west-gw"))
            for m, r in (("direct", direct), ("split", split))}
    assert sent["split"] > 5 * 1e6 / 1448 and sent["direct"] < sent["split"] / 10, sent
    assert set(split["cpu"]["gateways"]) == {"east", "west"} and split["cpu"]["gateways"]["east"]["cpu_s"] > 0
    assert split["variant"]["strategy"] and direct["variant"] is None
    # The WAN link's own counters, read from each gateway's /status over ssh: the gathered
    # megabytes left on east's link toward west.
    assert "wan_links" not in direct and split["wan_links"]["east→west"]["bytes_sent"] >= 5 * 1e6, split.get("wan_links")


@pytest.mark.lab
def test_mpich_gather_on_hosts_over_ssh_direct_and_split(sshd_lab, tmp_path):
    # MPICH's hydra launches from the root rank's host with its own ssh, one program as its
    # rsh; UCX_TLS=tcp,self reaches the ranks (HostsGrid.rank_env), the split env too.
    out = tmp_path / "m.jsonl"
    cp = gridsplit("bench", "gather", "--hosts", str(hosts_file(tmp_path, sshd_lab, impl="mpich")), "--nodes", "1",
                   "--impl", "mpich", "--sizes", "1M", "--reps", "5", "--budget", "0", "--check", "--no-report",
                   "--out", str(out), timeout=300)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    points = [r for r in rows if r["kind"] == "point"]
    assert [(r["mode"], r["impl"]) for r in points] == [("direct", "mpich"), ("split", "mpich")], cp.stdout
    assert all(r["verified"] is True and r["reps"] == 5 and r["total_s"] > 0 for r in points), points
    sent = {r["mode"]: sum(r["counters"]["by_host"].get(HOSTS[g], {}).get("OutSegs", 0) for g in ("east-gw", "west-gw"))
            for r in points}
    assert sent["split"] > 5 * 1e6 / 1448 and sent["direct"] < sent["split"] / 10, sent


@pytest.mark.lab
def test_host_that_does_not_answer_ssh_is_one_line(sshd_lab, tmp_path):
    # 10.71.1.77 is no host of the lab: ssh gives up after ConnectTimeout (3 s), never hangs.
    t0 = time.monotonic()
    cp = gridsplit("bench", "gather", "--hosts", str(hosts_file(tmp_path, sshd_lab, east="10.71.1.77")),
                   "--nodes", "1", "--sizes", "1K", "--out", str(tmp_path / "x.jsonl"), check=False, timeout=60)
    one_line_error(cp, "10.71.1.77 (site east) does not answer ssh")
    assert time.monotonic() - t0 < 20


@pytest.mark.lab
@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_app_on_hosts_over_ssh(sshd_lab, tmp_path, impl):
    # A user's command, its ranks in a directory of the run's own on each host (copied there
    # and back over ssh), the rank wrapper's CPU records among what comes back.
    toy = ROOT / "build" / "mpi" / impl / "apptoy"
    if not toy.exists():
        pytest.skip("mpi/apptoy not built (make build)")
    out = tmp_path / "app.jsonl"
    gridsplit("bench", "app", "--hosts", str(hosts_file(tmp_path, sshd_lab, impl=impl)), "--impl", impl, "-k", "1", "-n", "2",
              "--time-pattern", r"apptoy: time ([0-9.]+) s", "--pass-pattern", r"apptoy: check PASSED",
              "--out", str(out), "--no-report", "--", str(toy), "-r", "3", timeout=240)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert rows[0]["hosts"]["facts"][HOSTS["west-1"]]["hostname"] == "west-1"
    apps = [r for r in rows if r["kind"] == "app"]
    assert [r["mode"] for r in apps] == ["direct", "split"]
    for r in apps:
        assert r["status"] == "ok" and r["verified"] is True, r["output_tail"]
        assert r["placement"]["observed"] == {"0": "east-1", "1": "west-1"}
        assert len(r["cpu"]["ranks"]["per_rank"]) == 2
    assert set(apps[1]["cpu"]["gateways"]) == {"east", "west"}


@pytest.mark.lab
def test_a_silent_gateway_is_refused_or_started(sshd_lab, tmp_path):
    # Last in this module: it stops the lab's east gateway. Without start = true that is one line;
    # with it, the bench starts gridsplitd from the config over ssh, and a split run goes through it.
    import signal
    from gridsplit.lab.names import LabNames
    from gridsplit.lab.realize import load_state
    names = LabNames.from_env()
    os.kill(load_state(names).data["pids"]["gw-east"], signal.SIGTERM)
    args = ["--modes", "split", "--nodes", "1", "--sizes", "10K", "--reps", "3", "--no-report"]
    cp = gridsplit("bench", "gather", "--hosts", str(hosts_file(tmp_path, sshd_lab)), *args,
                   "--out", str(tmp_path / "a.jsonl"), check=False, timeout=120)
    one_line_error(cp, f"gridsplitd on {HOSTS['east-gw']} (site east) does not answer on 127.0.0.1:7300")
    started = None
    try:
        hosts = hosts_file(tmp_path, sshd_lab, extra=f'[gateways]\nstart = true\ngridsplitd = "{ROOT}/target/release/gridsplitd"\n'
                           f'log = "{tmp_path}/gw.log"\n', east_extra=f'gateway_config = "{names.state_dir}/gw-east.toml"\n')
        out = tmp_path / "b.jsonl"
        cp = gridsplit("bench", "gather", "--hosts", str(hosts), *args, "--out", str(out), check=False, timeout=120)
        ss = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-east-gw", "ss", "-Hltnp", "sport = :7300"],
                            text=True, capture_output=True).stdout
        started = int(ss.split("pid=")[1].split(",")[0]) if "pid=" in ss else None
        assert cp.returncode == 0, cp.stdout + cp.stderr + (tmp_path / "gw.log").read_text()
        meta, point = [json.loads(l) for l in out.read_text().splitlines()]
        assert meta["hosts"]["gateways"]["east"]["started_by_bench"] is True
        assert meta["hosts"]["gateways"]["west"]["started_by_bench"] is False
        # The started gateway's CPU figure is there (a silent one has none); its value may be 0: /proc counts
        # CPU in 10 ms ticks, and three 10 KB gathers can take less.
        assert point["mode"] == "split" and point["cpu"]["gateways"]["east"]["cpu_s"] >= 0
    finally:
        if started:
            os.kill(started, signal.SIGTERM)
