"""Workers registered in etcd, read the way workerctl reads them
(src/adapters/wk_etcd_registry.c): every key under the registry prefix (default
"/workers/") holds a worker's heartbeat; a worker can take a task when its heartbeat is
valid, ready, not draining, has free slots and an address; candidates are ordered by
most free slots, then fewest running tasks, then a per-client random tie-break.

Picking a worker (the same rule as workerctl, README "Picking a worker"):
  - records with draining=true or ready=false are skipped;
  - a task that pins an epoch goes to the workers whose record's "code" lists that
    epoch of the function; a record without "code", or with code_truncated and not
    listing it, is a last resort; one that lists the function without the epoch is
    never picked;
  - a worker that refused (UNAVAILABLE, RESOURCE_EXHAUSTED for a slot) or could not be
    reached is backed off (Backoff): tried after the others for 2 s doubling to 30 s,
    and while its record has not been re-put since (a killed worker's stale record costs
    one attempt); the next worker is tried within the same submit.

etcd is reached through its v3 JSON gateway (standard library only). Endpoints are a
comma-separated list of http(s)://host:port: a request goes to the current endpoint and,
when it cannot be reached, to the next; the one that answered becomes current."""

import base64
import json
import os
import random
import threading
import urllib.error
import urllib.request

DEFAULT_PREFIX = "/workers/"
DEFAULT_ETCD = "http://127.0.0.1:2379"


class EtcdError(Exception):
    """etcd could not be reached (`unreachable` True) or answered an error."""

    def __init__(self, message, unreachable):
        super().__init__(message)
        self.unreachable = unreachable


class Worker(object):
    """One registry entry: `key`, `address`, `valid` (False: `error` says why), `ready`,
    `draining`, `task_slots`, `free_slots`, `running_tasks`, `reserved_slots`,
    `deployment`, `service`, `version`, `updated_unix_ms`, `lease`."""

    def __init__(self, prefix, key, value, lease):
        self.key = key
        self.lease = lease
        self.valid = True
        self.error = ""
        try:
            j = json.loads(value)
            if not isinstance(j, dict):
                raise ValueError("not an object")
        except ValueError:
            j, self.valid, self.error = {}, False, "value is not a JSON object"
        self.address = j.get("address") if isinstance(j.get("address"), str) else ""
        if not self.address:
            self.address = key[len(prefix):] if key.startswith(prefix) else key
        for name in ("deployment", "service", "version"):
            v = j.get(name)
            setattr(self, name, v if isinstance(v, str) else "")
        for name in ("task_slots", "reserved_slots", "running_tasks", "free_slots"):
            v = j.get(name, 0)
            ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 0xFFFFFFFF
            if self.valid and (not ok or (name in ("task_slots", "free_slots") and name not in j)):
                self.valid, self.error = False, 'missing or malformed "%s"' % name
            setattr(self, name, v if ok else 0)
        upd = j.get("updated_unix_ms")
        if self.valid and not (isinstance(upd, int) and not isinstance(upd, bool)):
            self.valid, self.error = False, 'missing or malformed "updated_unix_ms"'
        self.updated_unix_ms = upd if isinstance(upd, int) else 0
        ready, draining = j.get("ready"), j.get("draining", False)
        if self.valid and not isinstance(ready, bool):
            self.valid, self.error = False, 'missing or malformed "ready"'
        if self.valid and not isinstance(draining, bool):
            self.valid, self.error = False, 'missing or malformed "draining"'
        self.ready = ready is True
        self.draining = draining is True
        # "code": {fn: {"current": N, "epochs": [{"epoch": N, "digest": hex}, ...]}}; a
        # malformed one counts as none (the worker is a last resort for pinned epochs)
        self.code = None
        self.code_truncated = j.get("code_truncated") is True
        code = j.get("code")
        if self.valid and isinstance(code, dict):
            try:
                self.code = {fn: {"current": int(v.get("current") or 0),
                                  "epochs": {int(e["epoch"]): (e.get("digest") or "")
                                             for e in v["epochs"]}}
                             for fn, v in code.items()}
            except (AttributeError, KeyError, TypeError, ValueError):
                self.code = None

    def holds(self, function, epoch):
        """True when the record lists `epoch` of `function`, False when it lists the
        code it holds without that epoch, None when it cannot tell (no "code", or
        code_truncated without it)."""
        if self.code is None:
            return None
        f = self.code.get(function)
        if f is not None and int(epoch) in f["epochs"]:
            return True
        return None if self.code_truncated else False

    def epochs(self, function):
        """{epoch: digest} of `function` as the record lists them (empty: none)."""
        return dict(((self.code or {}).get(function) or {}).get("epochs") or {})

    @property
    def eligible(self):
        """Can take a task: valid, ready, not draining, a free slot, an address."""
        return self.valid and self.ready and not self.draining and self.free_slots > 0 \
            and bool(self.address)

    def __repr__(self):
        return "Worker(%s, free %d/%d%s)" % (self.address, self.free_slots, self.task_slots,
                                            "" if self.eligible else ", not eligible")


class Registry(object):
    """Reads the registry under `prefix` from the etcd `endpoints` (comma-separated
    http(s)://host:port). Thread-safe. ValueError for a bad endpoint list or prefix."""

    def __init__(self, endpoints, prefix=DEFAULT_PREFIX, timeout=5.0):
        self.endpoints = [e.strip().rstrip("/") for e in endpoints.split(",") if e.strip()]
        if not self.endpoints:
            raise ValueError("etcd: no endpoint given")
        for e in self.endpoints:
            if not (e.startswith("http://") or e.startswith("https://")):
                raise ValueError("etcd endpoint %r: expected http://host:port or https://host:port"
                                 % e)
        if not prefix:
            raise ValueError("etcd prefix is empty (it would list every etcd key)")
        self.prefix = prefix
        self.timeout = timeout
        self._current = 0
        self._lock = threading.Lock()
        self._seed = random.getrandbits(64) | 1
        self.full = 0  # set by candidates()
        # proxies from the environment are ignored, as workerctl's libcurl client does
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _post(self, path, body):
        data = json.dumps(body).encode()
        errors = []
        with self._lock:
            start = self._current
        for k in range(len(self.endpoints)):
            i = (start + k) % len(self.endpoints)
            url = self.endpoints[i] + path
            req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            try:
                with self._opener.open(req, timeout=self.timeout) as r:
                    out = json.loads(r.read())
            except urllib.error.HTTPError as e:
                text = e.read().decode("utf-8", "replace")[:300]
                if e.code >= 500 and '"error"' not in text:
                    errors.append("%s: HTTP %d" % (url, e.code))
                    continue
                raise EtcdError("etcd %s: HTTP %d: %s" % (url, e.code, text), False)
            except (OSError, ValueError) as e:
                errors.append("%s: %s" % (url, getattr(e, "reason", e)))
                continue
            with self._lock:
                self._current = i
            return out
        raise EtcdError("cannot reach etcd (%s)" % "; ".join(errors), True)

    def workers(self):
        """Every entry under the prefix, in key order (invalid ones included)."""
        key = self.prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1]) if key[-1] < 0xFF else b"\0"
        out = self._post("/v3/kv/range", {"key": base64.b64encode(key).decode(),
                                          "range_end": base64.b64encode(end).decode()})
        ws = []
        for kv in out.get("kvs", []):
            k = base64.b64decode(kv.get("key", "")).decode("utf-8", "replace")
            v = base64.b64decode(kv.get("value", "")).decode("utf-8", "replace")
            ws.append(Worker(self.prefix, k, v, int(kv.get("lease", 0) or 0)))
        ws.sort(key=lambda w: w.key)
        return ws

    def candidates(self, avoid=()):
        """The eligible workers, best first (most free slots, fewest running tasks, then
        this client's random tie-break), one per address; addresses in `avoid` (that
        just failed) go last. EtcdError when etcd cannot be read."""
        best = {}
        ws = self.workers()
        # workers that would be candidates but for their slots: no candidate then is NoSlot
        self.full = sum(1 for w in ws if w.valid and w.ready and not w.draining and w.address
                        and w.free_slots == 0)
        for w in ws:
            if w.eligible and w.address not in best:
                best[w.address] = w
        return sorted(best.values(), key=lambda w: (w.address in avoid, -w.free_slots,
                                                    w.running_tasks, self._tie(w.address)))

    def _tie(self, address):
        h = 1469598103934665603 ^ self._seed  # FNV-1a mixed with the client's seed
        for b in address.encode():
            h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        return h


class Backoff(object):
    """Per-worker back-off of the picking rule, bounded to `max_entries` workers (the
    one due soonest makes room). fail(addr, updated_unix_ms): the worker refused or
    could not be reached while its record said updated_unix_ms; it is backed off for
    2 s, doubling with each further failure up to 30 s, and while its record is not
    re-put (at most 30 s). ok(addr) forgets it. Not thread-safe (the engine's loop)."""

    FIRST, CAP = 2.0, 30.0

    def __init__(self, max_entries=256, clock=None):
        import time
        self.max_entries = max_entries
        self.clock = clock or time.monotonic
        self._e = {}  # addr -> [fails, until, failed_at, seen_updated_unix_ms]

    def fail(self, addr, updated_unix_ms=0):
        now = self.clock()
        e = self._e.get(addr)
        if e is None:
            if len(self._e) >= self.max_entries:
                del self._e[min(self._e, key=lambda a: self._e[a][1])]
            e = self._e[addr] = [0, 0.0, 0.0, 0]
        e[0] = min(e[0] + 1, 16)
        e[1] = now + min(self.FIRST * 2 ** (e[0] - 1), self.CAP)
        e[2] = now
        e[3] = updated_unix_ms

    def ok(self, addr):
        self._e.pop(addr, None)

    def active(self, addr, updated_unix_ms=0):
        """True while addr is backed off (its record's updated_unix_ms given)."""
        e = self._e.get(addr)
        if e is None:
            return False
        now = self.clock()
        if now < e[1]:
            return True
        if updated_unix_ms <= e[3] and now < e[2] + self.CAP:
            return True
        if now >= e[2] + self.CAP:
            del self._e[addr]
        return False

    def __len__(self):
        return len(self._e)


def pick_order(workers, function=None, epoch=0, backoff=None):
    """The picking rule's order of ranked candidates: for a pinned epoch (epoch > 0)
    the workers listing it, then those whose record cannot tell (others dropped); in
    each group the backed-off workers last. Returns (ordered list, how many dropped)."""
    groups = [list(workers)]
    dropped = 0
    if epoch:
        yes = [w for w in workers if w.holds(function, epoch) is True]
        unknown = [w for w in workers if w.holds(function, epoch) is None]
        dropped = len(workers) - len(yes) - len(unknown)
        groups = [yes, unknown]
    out = []
    for g in groups:
        late = [w for w in g if backoff is not None and backoff.active(w.address,
                                                                        w.updated_unix_ms)]
        out += [w for w in g if w not in late] + late
    return out, dropped


def default_target():
    """workerctl's rule for a client given no address: $WORKERCTL_ADDR, else etcd
    discovery when $WORKERCTL_ETCD is set, else 127.0.0.1:7070. Returns (addr, etcd)."""
    addr = os.environ.get("WORKERCTL_ADDR", "")
    if addr:
        return addr, None
    etcd = os.environ.get("WORKERCTL_ETCD", "")
    if etcd:
        return None, etcd
    return "127.0.0.1:7070", None
