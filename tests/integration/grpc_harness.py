"""The C gRPC server harness process (WK_GRPC_HARNESS) as the gRPC integration tests
drive it: started with its arguments and environment, its PORT line read, its stderr
kept, stopped with SIGTERM. Shared by test_grpc_server.py and test_grpc_tls.py."""

import queue
import signal
import subprocess
import threading
import time


class Harness:
    def __init__(self, argv, env=None):
        """Starts argv (the wrapper, if any, the harness and its arguments) and waits up
        to 60 s for its "PORT N" line."""
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        self.stderr = []
        lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stdout, lines.put),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append),
                         daemon=True).start()
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError("harness printed no PORT line; stderr: %s" % self.err())
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])
        self.addr = "127.0.0.1:%d" % self.port

    @staticmethod
    def _pump(stream, sink):
        for line in stream:
            sink(line)

    def err(self):
        return "".join(self.stderr)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=30):
        """SIGTERM, then its exit code (killed and an AssertionError past timeout)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("harness did not exit within %ds of SIGTERM" % timeout)
        time.sleep(0.1)  # let the stderr pump catch up
        return rc


def assert_clean_exit(h, rc):
    err = h.err()
    assert rc == 0, "harness exit code %d; stderr:\n%s" % (rc, err)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    assert '"component":"grpc_server"' not in err, err  # the adapter logs only surprises
