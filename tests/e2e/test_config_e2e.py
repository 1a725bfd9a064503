"""End-to-end: the worker's configuration (defaults < YAML file < WORKER_<NAME> < flags),
`worker --print-config`, and exit code 2 with one line per problem on stderr."""

import json
import os
import re
import subprocess

import grpc
import pytest

from conftest import ROOT, WORKER, pb


def run_worker(args, tmp_path, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    env.update(env_extra or {})
    return subprocess.run([WORKER] + list(args), capture_output=True, text=True, timeout=30,
                          env=env, cwd=str(cwd or tmp_path))


def parse_text(stdout):
    """{name: (value, source)} from the aligned --print-config text."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("#"):
            continue
        name, value, source = re.match(r"^(\S+)\s+(\S+)\s+(.+)$", line).groups()
        rows[name] = (value, source)
    return rows


@pytest.fixture
def setup(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    cfg = tmp_path / "worker.yaml"
    cfg.write_text("# a worker\n"
                   "task_slots: 32\n"
                   "executors: 3\n"
                   "pipeline_depth: 8\n"
                   "max_message_bytes: 8MiB\n")
    return tmp_path, code, cfg


def test_print_config_shows_each_source(setup):
    tmp, code, cfg = setup
    out = run_worker(["--print-config", "--config", str(cfg), "--task-slots", "40",
                      "--code-root", str(code), "--retention-ms", "5s"], tmp,
                     {"WORKER_EXECUTORS": "5", "WORKER_LOG_LEVEL": "debug"})
    assert out.returncode == 0, out.stderr
    rows = parse_text(out.stdout)
    cfg_name = str(cfg)
    assert rows["task_slots"] == ("40", "flag --task-slots")          # flag beats file
    assert rows["executors"] == ("5", "env WORKER_EXECUTORS")         # env beats file
    assert rows["pipeline_depth"] == ("8", "file %s:4" % cfg_name)
    assert rows["max_message_bytes"] == ("8388608", "file %s:5" % cfg_name)
    assert rows["log_level"] == ("debug", "env WORKER_LOG_LEVEL")
    assert rows["result_retention_ms"] == ("5000", "flag --retention-ms")
    assert rows["listen_addr"] == ("127.0.0.1:7070", "default")
    assert rows["code_root"] == (str(code), "flag --code-root")
    assert rows["executors_max"] == ("5", "default, raised to executors")
    # every setting is listed, and nothing started
    help_text = run_worker(["--help"], tmp).stdout
    settings_part = help_text[help_text.index("Settings:"):]
    flags = re.findall(r"^  --([a-z0-9-]+) [A-Z:]+", settings_part, re.M)
    assert sorted(f.replace("-", "_") for f in flags) == sorted(rows)
    assert "worker_listening" not in out.stderr


def test_print_config_json_and_worker_config_env(setup):
    tmp, code, cfg = setup
    out = run_worker(["--print-config", "--json", "--executors", "4"], tmp,
                     {"WORKER_CONFIG": str(cfg), "WORKER_CODE_ROOT": str(code)})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["task_slots"] == {"value": 32, "source": "file", "where": "%s:2" % cfg}
    assert doc["executors"] == {"value": 4, "source": "flag", "where": "--executors"}
    assert doc["code_root"]["source"] == "env"
    assert doc["log_level"] == {"value": "info", "source": "default"}


def test_bad_file_exits_2_with_the_line(setup):
    tmp, code, _ = setup
    bad = tmp / "bad.yaml"
    bad.write_text("task_slots: 4\n"
                   "task_slot: 32\n"
                   "executors: many\n")
    out = run_worker(["--config", str(bad), "--code-root", str(code)], tmp)
    assert out.returncode == 2
    assert "%s:2: unknown setting 'task_slot' (did you mean task_slots?)" % bad in out.stderr
    assert "%s:3: executors: expected a whole number, got 'many'" % bad in out.stderr
    assert "worker_listening" not in out.stderr and out.stdout == ""

    broken = tmp / "broken.yaml"
    broken.write_text("task_slots: 4\n  executors: 2\n")
    out = run_worker(["--print-config", "--config", str(broken)], tmp)
    assert out.returncode == 2 and out.stdout == ""
    assert "%s:2: YAML syntax error" % broken in out.stderr

    out = run_worker(["--config", str(tmp / "missing.yaml")], tmp)
    assert out.returncode == 2 and "missing.yaml: cannot read" in out.stderr


def test_bad_env_exits_2_naming_the_variable(setup):
    tmp, code, _ = setup
    out = run_worker(["--code-root", str(code)], tmp, {"WORKER_TASK_SLOTS": "lots"})
    assert out.returncode == 2
    assert "WORKER_TASK_SLOTS: expected a whole number, got 'lots'" in out.stderr
    assert "worker_listening" not in out.stderr


def test_invalid_values_all_reported_before_anything_binds(setup):
    tmp, code, _ = setup
    out = run_worker(["--task-slots", "0", "--slot-ttl-ms", "700000", "--listen", "nowhere",
                      "--code-root", str(tmp / "absent")], tmp, {"WORKER_EXECUTORS": "0"})
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.startswith("worker: ")]
    assert "worker: invalid configuration (5 problems):" in lines
    assert "worker: task_slots must be between 1 and 1048576, got 0 (from flag --task-slots)" in lines
    assert "worker: executors must be between 1 and 1024, got 0 (from env WORKER_EXECUTORS)" in lines
    assert any(l.startswith("worker: default_slot_ttl_ms (700000) must not exceed max_slot_ttl_ms")
               for l in lines)
    assert any("listen_addr must be host:port" in l and "(from flag --listen)" in l for l in lines)
    assert any(l.startswith("worker: code_root must be an existing directory") for l in lines)
    assert "worker_listening" not in out.stderr


def test_unknown_flag_exits_2(setup):
    tmp, _, _ = setup
    out = run_worker(["--task-slot", "3"], tmp)
    assert out.returncode == 2
    assert "unknown flag '--task-slot' (did you mean --task-slots?)" in out.stderr


def test_file_and_env_reach_the_running_worker(worker_factory, tmp_path):
    cfg = tmp_path / "one-slot.yaml"
    cfg.write_text("task_slots: 1\n")
    w = worker_factory("--config", str(cfg))
    w.wait_serving()
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="a", ttl_ms=60000))
    with pytest.raises(grpc.RpcError) as e:
        w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="b"))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    env = dict(os.environ, WORKER_TASK_SLOTS="1")
    w2 = worker_factory(env=env)
    w2.wait_serving()
    w2.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="a", ttl_ms=60000))
    with pytest.raises(grpc.RpcError) as e:
        w2.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="b"))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_docs_configuration_md_matches_the_table(tmp_path):
    out = run_worker(["--print-config", "--markdown"], tmp_path)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(ROOT, "docs", "specs", "configuration.md")) as f:
        doc = f.read()
    assert out.stdout in doc, ("docs/specs/configuration.md is stale: regenerate its table with "
                               "`worker --print-config --markdown`")


def test_a_failed_start_leaves_nothing_in_tmpdir(tmp_path):
    """A start that fails after the worker made its scratch directory and the
    executors' socket directory (here: listen_addr cannot be bound) removes both: the
    worker owns what it made under $TMPDIR, whichever way it exits."""
    code = tmp_path / "code"
    code.mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = run_worker(["--listen", "unix:%s" % (tmp_path / "no-such-dir" / "sock"),
                      "--code-root", str(code), "--executors", "1"], tmp_path,
                     {"TMPDIR": str(tmpdir)})
    assert out.returncode == 1, out.stderr
    assert "cannot serve on" in out.stderr
    assert sorted(p.name for p in tmpdir.iterdir()) == []
