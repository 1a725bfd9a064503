"""worker_client.results (python/worker_client): how events become Progress and
TaskResult objects, stdlib unittest. The decoding is lazy (a Progress's result, a
result's statistic are made when first read) and enum names come from a cached map;
these check that what a reader sees is unchanged."""

import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "worker_client", "src"))

from worker_client import results  # noqa: E402
from worker_client._proto import worker_pb2 as pb  # noqa: E402


def terminal_event():
    ev = pb.TaskEvent(task_id="t-1", kind=pb.TaskEvent.KIND_TERMINAL)
    r = ev.result
    r.task_id = "t-1"
    r.state = pb.TASK_STATE_SUCCEEDED
    r.phase = pb.PHASE_WRITER
    r.code_epoch = 3
    r.statistic.calls_total = 2
    r.statistic.calls_succeeded = 2
    out = r.outputs.add()
    out.index = 0
    out.value = b'{"x": 1}'
    return ev


class EnumNames(unittest.TestCase):
    def test_known_and_unknown_values(self):
        self.assertEqual(results.state_name(pb.TASK_STATE_RUNNING), "RUNNING")
        self.assertEqual(results.state_name(pb.TASK_STATE_SUCCEEDED), "SUCCEEDED")
        self.assertEqual(results.state_name(999), "999")  # a state this client does not know
        self.assertEqual(results._enum_name(pb.Phase, pb.PHASE_CALLS, "PHASE_"), "CALLS")
        self.assertEqual(results._enum_name(pb.FailureCode, 12345, "FAILURE_CODE_"), "12345")


class ProgressAndResult(unittest.TestCase):
    def test_progress_of_a_terminal_event(self):
        p = results.progress_from_event(terminal_event())
        self.assertEqual((p.task_id, p.kind, p.state, p.phase), ("t-1", "terminal", "SUCCEEDED",
                                                                  "WRITER"))
        self.assertEqual((p.calls_total, p.calls_done), (2, 2))
        r = p.result
        self.assertIs(p.result, r)  # decoded once
        self.assertEqual((r.task_id, r.state, r.phase, r.code_epoch), ("t-1", "SUCCEEDED",
                                                                        "WRITER", 3))
        self.assertEqual(r.values(), [{"x": 1}])
        self.assertEqual(r.statistic["calls_total"], 2)
        self.assertEqual(r.statistic["calls_succeeded"], 2)
        self.assertIs(r.statistic, r.statistic)

    def test_progress_event_has_no_result(self):
        ev = pb.TaskEvent(task_id="t-2", kind=pb.TaskEvent.KIND_PROGRESS)
        ev.progress.phase = pb.PHASE_CALLS
        ev.progress.calls_total = 10
        ev.progress.total_known = True
        ev.progress.calls_succeeded = 4
        p = results.progress_from_event(ev)
        self.assertEqual((p.kind, p.state, p.phase, p.calls_total, p.calls_done),
                         ("progress", "RUNNING", "CALLS", 10, 4))
        self.assertIsNone(p.result)
        self.assertAlmostEqual(p.fraction, 0.4)

    def test_a_progress_made_with_a_result_keeps_it(self):
        r = results.TaskResult(terminal_event().result)
        p = results.Progress("t-1", "snapshot", "SUCCEEDED", "WRITER", result=r)
        self.assertIs(p.result, r)


if __name__ == "__main__":
    unittest.main()
