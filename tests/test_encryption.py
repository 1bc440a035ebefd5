"""Encrypted WAN links ([gateways] encryption, gridsplitd [wan] encryption;
docs/design/wan-encryption.md): the topology key and the generated config, key
generation, and an eavesdropper in the lab's WAN namespace (tcpdump) who must
not see a known payload pattern that crosses split, unless the link is
insecure, where he must (so that the check can fail)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from conftest import gridsplit, needs_root
from gridsplit.topology_file import load_topology

ROOT = Path(__file__).resolve().parent.parent
MINI = resources.files("gridsplit").joinpath("presets", "mini.toml").read_text()
CANARY = b"EAVESDROP-CANARY-"


def topo_text(encryption: str | None) -> str:
    text = MINI.replace('name = "mini"', 'name = "sealed"')
    if encryption is not None:
        # Into mini's own [gateways] table (a TOML table is declared once).
        assert "[gateways]\n" in text
        text = text.replace("[gateways]\n", f'[gateways]\nencryption = "{encryption}"\n', 1)
    return text


def write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


# -- topology, config, keys ---------------------------------------------------------


def test_encryption_defaults_to_noise_and_reaches_the_gateway_config(tmp_path):
    assert load_topology(write(tmp_path, "d.toml", topo_text(None))).gateways.encryption == "noise"
    conf = gridsplit("gateway", "config", "-t", write(tmp_path, "d.toml", topo_text(None)), "--site", "east").stdout
    assert 'encryption = "noise"' in conf.split("[wan]")[1].split("[[")[0], conf
    conf = gridsplit("gateway", "config", "-t", write(tmp_path, "i.toml", topo_text("insecure")), "--site", "east").stdout
    assert 'encryption = "insecure"' in conf


def test_a_bad_encryption_value_is_one_line(tmp_path):
    cp = gridsplit("gateway", "config", "-t", write(tmp_path, "b.toml", topo_text("tls")), "--site", "east",
                   check=False)
    err = cp.stderr.strip()
    assert cp.returncode != 0 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "gateways.encryption" in err and "noise" in err, err


def test_gateway_config_writes_a_new_key_once(tmp_path):
    key = tmp_path / "psk"
    t = write(tmp_path, "d.toml", topo_text(None))
    cp = gridsplit("gateway", "config", "-t", t, "--site", "east", "--psk-file", str(key), "--new-key")
    assert f'psk_file = "{key}"' in cp.stdout
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text().strip()) == 64
    first = key.read_text()
    cp = gridsplit("gateway", "config", "-t", t, "--site", "east", "--psk-file", str(key), "--new-key", check=False)
    assert cp.returncode != 0 and "exists" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    gridsplit("gateway", "new-key", "--psk-file", str(key))
    assert key.read_text() != first and stat.S_IMODE(key.stat().st_mode) == 0o600
    # A bad option is refused before any key is written.
    other = tmp_path / "psk2"
    for bad in (["--gateway", "5"], ["--admin", "notanendpoint"]):
        cp = gridsplit("gateway", "config", "-t", t, "--site", "east", "--psk-file", str(other), "--new-key", *bad,
                       check=False)
        assert cp.returncode != 0 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
        assert not other.exists(), bad


def test_gridsplitd_refuses_encryption_in_a_link_table(tmp_path):
    gsd = ROOT / "target" / "release" / "gridsplitd"
    if not gsd.exists():
        pytest.skip("gridsplitd not built (make build)")
    key = tmp_path / "psk"
    t = write(tmp_path, "d.toml", topo_text(None))
    conf = gridsplit("gateway", "config", "-t", t, "--site", "east", "--psk-file", str(key), "--new-key").stdout
    good = write(tmp_path, "gw.toml", conf)
    assert subprocess.run([str(gsd), "--config", good, "--check-config"], capture_output=True).returncode == 0
    bad = write(tmp_path, "bad.toml", conf.replace('[[link]]\npeer = "west"', '[[link]]\npeer = "west"\nencryption = "insecure"'))
    cp = subprocess.run([str(gsd), "--config", bad, "--check-config"], capture_output=True, text=True)
    assert cp.returncode == 2 and "link[0].encryption" in cp.stderr and "[wan]" in cp.stderr, cp.stderr
    bad = write(tmp_path, "bad2.toml", conf.replace('encryption = "noise"', 'encryption = "tls"'))
    cp = subprocess.run([str(gsd), "--config", bad, "--check-config"], capture_output=True, text=True)
    assert cp.returncode == 2 and "wan.encryption" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1


# -- the eavesdropper -----------------------------------------------------------------

SERVER = ("import socket,sys\nl=socket.socket();l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
          "l.bind(('0.0.0.0',int(sys.argv[1])));l.listen(1);print('ready',flush=True)\n"
          "c,_=l.accept();n=0\nwhile True:\n b=c.recv(65536)\n if not b: break\n n+=len(b)\nprint(n,flush=True)")
CLIENT = ("import socket,sys\ns=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=20)\n"
          "msg=b''.join(b'EAVESDROP-CANARY-%08d|' % i for i in range(int(sys.argv[3])))\n"
          "s.sendall(msg);s.shutdown(socket.SHUT_WR);s.recv(1);print(len(msg))")
PORT = 5577


def in_ns(name: str) -> list[str]:
    return ["ip", "netns", "exec", name]


def capture_transfer(tmp: Path, topo: str) -> tuple[bytes, dict, str]:
    """Brings the lab up on `topo`, sends a canary payload from east-1 to west-1
    through the gateways while tcpdump records the WAN namespace, and returns the
    capture, east's gateway status and its rendered status."""
    gridsplit("lab", "down")
    gridsplit("lab", "up", "--topology", topo)
    try:
        from gridsplit.lab.names import LabNames
        names = LabNames.from_env()
        hosts = {h["name"]: h for h in json.loads(gridsplit("lab", "status", "--json").stdout)["hosts"]}
        pcap = tmp / "wan.pcap"
        dump = subprocess.Popen([*in_ns(names.wan_ns), "tcpdump", "-i", "any", "-s", "0", "-U", "-n", "-w", str(pcap),
                                 "tcp port 7200"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            # tcpdump says "listening on ..." once its capture runs (after a
            # line naming the link type).
            lines = [dump.stderr.readline() for _ in range(1)]
            while "listening" not in lines[-1] and lines[-1] and len(lines) < 5:
                lines.append(dump.stderr.readline())
            assert "listening" in lines[-1], lines
            # Both ends with the library: the accepting end's consumes the
            # gateway's header (the original peer) inside accept().
            env = {**os.environ, "LD_PRELOAD": str(ROOT / "build" / "libgridsplit.so"),
                   "GRIDSPLIT_CONFIG": str(names.state_dir / "nodes.conf"), "GRIDSPLIT_SPLIT": "all"}
            server = subprocess.Popen([*in_ns(hosts["west-1"]["ns"]), sys.executable, "-c", SERVER, str(PORT)],
                                      stdout=subprocess.PIPE, text=True, env=env)
            assert server.stdout.readline().strip() == "ready"
            dst = hosts["west-1"]["ip"]
            cp = subprocess.run([*in_ns(hosts["east-1"]["ns"]), sys.executable, "-c", CLIENT, dst, str(PORT), "8000"], env=env,
                                capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0, cp.stderr
            sent = int(cp.stdout.strip())
            got = int(server.communicate(timeout=30)[0].strip())
            assert got == sent, (got, sent)
            time.sleep(0.5)
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=10)
        st = json.loads(gridsplit("gateway", "status", "--lab", "east", "--json").stdout)
        assert st["counters"]["relayed_bytes_out"] >= sent, "the payload did not cross split"
        shown = gridsplit("gateway", "status", "--lab", "east").stdout
        return pcap.read_bytes(), st, shown
    finally:
        gridsplit("lab", "down")


@pytest.mark.lab
@pytest.mark.parametrize("encryption", ["noise", "insecure"])
def test_an_eavesdropper_on_the_wan_sees_no_payload(tmp_path, encryption):
    needs_root()
    if shutil.which("tcpdump") is None:
        pytest.fail("tcpdump is missing: make deps installs it (apt-get install tcpdump)")
    if not (ROOT / "build" / "libgridsplit.so").exists():
        pytest.skip("libgridsplit.so not built (make build)")
    cap, st, shown = capture_transfer(tmp_path, write(tmp_path, "t.toml", topo_text(encryption)))
    assert len(cap) > 200_000, f"the capture holds {len(cap)} bytes: did tcpdump see the WAN link?"
    assert st["encryption"] == encryption
    seen = cap.count(CANARY)
    if encryption == "noise":
        assert seen == 0, f"{seen} copies of the payload pattern in clear on the WAN"
        assert not st["warnings"]
    else:
        # The check can fail: in clear, the eavesdropper reads the payload.
        assert seen > 1000, seen
        assert any("in clear" in w for w in st["warnings"]), st["warnings"]
        assert "warning" in shown and "insecure" in shown, shown
