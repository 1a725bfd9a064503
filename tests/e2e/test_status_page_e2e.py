"""The status page in a real browser: Debian's headless Chromium, driven over the
DevTools protocol (tests/e2e/cdp.py), loads the page of a worker with tasks in flight
(through the ?token= login flow), and the test checks what it shows against /status and
against the worker itself (GetTaskResult), finds no console errors, and keeps a
screenshot in <build>/test-artifacts/status.png."""

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from conftest import BUILD, Worker, pb
from cdp import CHROMIUM, Browser

TOKEN = "page-token-5f1c"
SECRET = "SECRET-ARG-hunter2-7d3e"  # in the tasks' arguments: never on the page or in /status
MD = [("authorization", "Bearer " + TOKEN)]

# one function for every task: with executor_isolation=function every executor serves it
HOLD = ("import time\n"
        "def handler(args, ctx):\n"
        "    if args.get('fail'):\n"
        "        raise ValueError('asked to fail')\n"
        "    time.sleep(args.get('s', 0))\n"
        "    return {'ok': True, 'echo': args}\n")


def status(port, token=TOKEN):
    req = urllib.request.Request("http://127.0.0.1:%d/status" % port,
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def submit(w, task_id, function, args, builder=""):
    fn = pb.FunctionCallConfig(name=function, type=builder, args=json.dumps(args).encode())
    return w.stub.SubmitTask(pb.SubmitTaskRequest(task_id=task_id, function=fn), timeout=10,
                             metadata=MD)


def result(w, task_id):
    return w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=5, metadata=MD)


def wait_terminal(w, task_id, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = result(w, task_id)
        if r.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELLED):
            return r
        time.sleep(0.05)
    raise AssertionError("task %s did not finish" % task_id)


def wait_status(port, pred, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = status(port)
        if pred(s):
            return s
        time.sleep(0.1)
    raise AssertionError("/status never matched: %s" % json.dumps(s)[:2000])


# What the page shows, read from its DOM.
EXTRACT = r"""(() => {
  const t = (id) => document.getElementById(id).textContent;
  const rows = (id, key) => [...document.querySelectorAll('#' + id + ' tbody tr')]
      .filter((tr) => tr.dataset[key] !== undefined)
      .map((tr) => ({key: tr.dataset[key], cells: [...tr.cells].map((c) => c.textContent)}));
  return {
    service: t('w-service'), state: t('w-state'), version: t('w-version'), addr: t('w-addr'),
    profile: t('w-profile'), etcd: t('etcd-state'), uptime: t('w-uptime'),
    slots: {total: t('slots-total'), free: t('slots-free'), allocated: t('slots-allocated'),
            running: t('slots-running')},
    barRunning: document.getElementById('bar-running').style.width,
    live: t('tasks-live'), finished: t('totals-finished'), failed: t('totals-failed'),
    tasks: rows('tasks', 'taskId'), executors: rows('executors', 'execId'),
    recent: rows('recent', 'recentId'),
    charts: [...document.querySelectorAll('svg path')].map((p) => +p.dataset.points),
    statusNow: document.body.dataset.statusNow,
    html: document.documentElement.outerHTML,
    cookie: document.cookie,
  };
})()"""


def test_status_page_in_chromium(tmp_path):
    assert os.path.exists(CHROMIUM), "chromium is not installed: run scripts/deps.sh"
    w = Worker(str(tmp_path / "w"), executors=3,
               extra_args=["--executors-max", "3", "--task-slots", "8", "--metrics-addr",
                           "127.0.0.1:0", "--auth-token", TOKEN])
    browser = None
    try:
        port = w.events("metrics_listening")[0]["port"]
        w.deploy("hold", HOLD)
        wait_status(port, lambda s: s["worker"]["state"] == "serving")
        # two terminal tasks: one failed, one succeeded (the failure is listed first)
        submit(w, "t-quick", "hold", {"s": 0})
        assert wait_terminal(w, "t-quick").state == pb.TASK_STATE_SUCCEEDED
        submit(w, "t-boom", "hold", {"fail": True, "password": SECRET})
        assert wait_terminal(w, "t-boom").state == pb.TASK_STATE_FAILED
        # two tasks in flight: 3 of 4 calls done, and 0 of 1
        submit(w, "t-prog", "hold", [{"s": 0, "password": SECRET}, {"s": 0}, {"s": 0},
                                     {"s": 300, "token": SECRET}], builder="map")
        submit(w, "t-wait", "hold", {"s": 300, "password": SECRET})
        s = wait_status(port, lambda s: {t["id"]: (t["calls_done"], t["calls_total"])
                                         for t in s["tasks"]["list"]} ==
                        {"t-prog": (3, 4), "t-wait": (0, 1)})
        assert s["slots"]["running"] == 2 and s["slots"]["total"] == 8
        # a few seconds of history for the charts
        wait_status(port, lambda s: len(s["history"]["t_unix_ms"]) >= 3)

        browser = Browser()
        # the ?token= flow: a cookie, then the page without the token in the address
        browser.navigate("http://127.0.0.1:%d/?token=%s" % (port, TOKEN))
        browser.wait_for("document.body && document.body.dataset.loaded === '1'")
        assert browser.evaluate("location.pathname + location.search") == "/"
        # wait for a render after the tasks settled, then read the page and /status
        browser.wait_for("document.querySelectorAll('#tasks tbody tr[data-task-id]').length === 2")
        time.sleep(1.5)
        page = browser.evaluate(EXTRACT)
        s = status(port)

        # the header against /status
        assert page["service"] == s["worker"]["service"] == "worker"
        assert page["state"] == s["worker"]["state"] == "serving"
        assert page["version"] == s["worker"]["version"]
        assert page["addr"] == s["worker"]["advertise_addr"] == w.addr
        assert page["profile"] == "block / worker"
        assert page["etcd"] == "stand-alone"
        # slots: the core's figures (two tasks hold their slots)
        assert page["slots"] == {k: str(s["slots"][k]) for k in ("total", "free", "allocated",
                                                                  "running")}
        assert page["slots"]["running"] == "2" and page["slots"]["free"] == "6"
        assert page["barRunning"] == "25%"
        assert page["live"] == "2"
        assert page["finished"] == "2" and page["failed"] == "1"
        # tasks in flight, against /status and the worker's own answer
        tasks = {r["key"]: r["cells"] for r in page["tasks"]}
        assert set(tasks) == {t["id"] for t in s["tasks"]["list"]} == {"t-prog", "t-wait"}
        for t in s["tasks"]["list"]:
            cells = tasks[t["id"]]
            assert cells[0] == t["id"] and cells[1] == t["function"] == "hold"
            assert cells[2] == str(t["epoch"]) and t["epoch"] >= 1
            assert cells[3] == t["phase"] == "CALLS"
            assert cells[4] == "%d/%d" % (t["calls_done"], t["calls_total"])
            r = result(w, t["id"])
            assert r.state == pb.TASK_STATE_RUNNING
            assert r.code_epoch == t["epoch"]
        assert tasks["t-prog"][4] == "3/4" and tasks["t-wait"][4] == "0/1"
        # executors: the pool's
        execs = {r["key"]: r["cells"] for r in page["executors"]}
        assert set(execs) == {str(e["id"]) for e in s["executors"]["list"]}
        for e in s["executors"]["list"]:
            cells = execs[str(e["id"])]
            assert cells[1] == str(e["pid"]) and os.path.exists("/proc/%d" % e["pid"])
            assert cells[3] == (e["function"] or "–")
        busy = [e for e in s["executors"]["list"] if e["state"] == "busy"]
        assert 1 <= len(busy) <= 2 and all(e["function"] == "hold" for e in busy)
        # recent terminal tasks: failures first
        assert [r["key"] for r in page["recent"]] == [r["id"] for r in s["recent"]] == \
            ["t-boom", "t-quick"]
        assert page["recent"][0]["cells"][2:4] == ["FAILED", "CALL_FAILED"]
        assert page["recent"][1]["cells"][2:4] == ["SUCCEEDED", ""]
        # the charts drew the history
        assert len(page["charts"]) == 5 and max(page["charts"]) >= 2
        # no argument ever reaches the page or /status; the cookie is HttpOnly
        assert SECRET not in page["html"] and SECRET not in json.dumps(s)
        assert TOKEN not in page["html"] and page["cookie"] == ""
        # nothing went wrong in the page (CSP violations, failed loads, exceptions)
        assert browser.console_errors() == []
        art = os.path.join(BUILD, "test-artifacts")
        os.makedirs(art, exist_ok=True)
        browser.screenshot(os.path.join(art, "status.png"))
        with open(os.path.join(art, "status.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    finally:
        if browser:
            browser.close()
        w.kill()


def test_status_json_without_browser_and_page_off(worker_factory):
    """/status is there without a token when none is configured; status_page=false
    leaves /metrics alone."""
    w = worker_factory("--metrics-addr", "127.0.0.1:0")
    port = w.events("metrics_listening")[0]["port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=10) as r:
        s = json.loads(r.read())
    assert s["worker"]["status_addr"] == "127.0.0.1:%d" % port
    assert s["slots"]["total"] == 16
    off = worker_factory("--metrics-addr", "127.0.0.1:0", "--status-page", "false")
    port = off.events("metrics_listening")[0]["port"]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=10)
    assert e.value.code == 404
    deadline = time.time() + 20  # the gauges are sampled every 250 ms once started
    while True:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            if b"worker_task_slots 16" in r.read():
                break
        assert time.time() < deadline
        time.sleep(0.1)
