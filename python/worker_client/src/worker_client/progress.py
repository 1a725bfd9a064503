"""Progress bars for submit(..., progress=True): tqdm when it is importable, else a
plain one: on a terminal one line redrawn in place (calls done/total, rate, ETA), and
elsewhere a line per phase change and at most one a second."""

import sys
import time


class PlainBar(object):
    """calls done/total, rate and ETA on `file` (stderr)."""

    def __init__(self, task_id, file=None, min_interval=1.0):
        self.task_id = task_id
        self.file = file or sys.stderr
        self.tty = hasattr(self.file, "isatty") and self.file.isatty()
        self.min_interval = 0.1 if self.tty else min_interval
        self.start = time.monotonic()
        self.last = 0.0
        self.last_phase = None

    def update(self, p):
        now = time.monotonic()
        phase_changed = p.phase != self.last_phase
        if not (phase_changed or p.kind == "terminal" or now - self.last >= self.min_interval):
            return
        self.last, self.last_phase = now, p.phase
        elapsed = max(now - self.start, 1e-9)
        rate = p.calls_done / elapsed
        text = "%s %s %d/%s calls" % (self.task_id, p.state if p.kind == "terminal" else p.phase,
                                      p.calls_done, p.calls_total or "?")
        if p.calls_total:
            text += " (%d%%)" % (100 * p.calls_done // p.calls_total)
        text += " %.1f/s" % rate
        if p.calls_total and rate > 0 and p.kind != "terminal":
            text += " ETA %.0fs" % ((p.calls_total - p.calls_done) / rate)
        if p.calls_failed:
            text += " failed %d" % p.calls_failed
        if self.tty:
            self.file.write("\r\x1b[K" + text + ("\n" if p.kind == "terminal" else ""))
        else:
            self.file.write(text + "\n")
        self.file.flush()

    def close(self):
        pass


class TqdmBar(object):
    """A tqdm bar (total set once the worker knows it)."""

    def __init__(self, task_id, tqdm, file=None):
        self.bar = tqdm(desc=task_id, unit="call", file=file, total=None, leave=True)

    def update(self, p):
        if p.calls_total and self.bar.total != p.calls_total:
            self.bar.total = p.calls_total
            self.bar.refresh()
        if p.calls_done > self.bar.n:
            self.bar.update(p.calls_done - self.bar.n)
        self.bar.set_postfix_str(p.state if p.kind == "terminal" else p.phase, refresh=False)
        if p.kind == "terminal":
            self.close()

    def close(self):
        self.bar.close()


def make_bar(task_id, file=None, use_tqdm=True):
    """A bar object with update(Progress) and close(): tqdm's when importable and
    use_tqdm, else PlainBar."""
    if use_tqdm:
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            return TqdmBar(task_id, tqdm, file)
    return PlainBar(task_id, file)
