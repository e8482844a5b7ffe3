"""Host 0 (the coordinator) dies: the other hosts print one line and exit 75, not JAX's abort.

jax.distributed's coordination service runs inside host 0's process. When that process dies, every other
host's JAX client notices within a second or two (its long-running error poll fails) and calls its
`missed_heartbeat_callback`, whose default is `LOG(FATAL) << "Terminating process because the JAX
distributed service detected fatal errors ..."`: a native stack, then abort(), and Python's faulthandler
adds a page of loaded extension modules. A supervisor sees exit 134 (SIGABRT), a crash. The callback cannot
be replaced from Python in jaxlib 0.10.2: its argument is an absl::Status, which has no Python conversion,
so a Python callable ends in `terminate called after throwing an instance of 'std::bad_cast'` (the same
abort, one line earlier; tried on two processes).

So the abort itself is intercepted. `watch(address, on_lost)` puts a SIGABRT handler in place with libc's
signal() (ctypes; Python's own `signal.signal` handler only runs on the main thread after the C handler
returns, and glibc's abort() does not return to it). The handler runs on the thread that aborts (a gRPC
thread of JAX's client) and takes the GIL, like any ctypes callback from a foreign thread. It asks one
question: does host 0 still accept a TCP connection on the coordinator's port?
  - no (refused: the process is gone; no answer within CONNECT_TIMEOUT_S: the VM is gone) -> `on_lost(why)`,
    which prints the run's one `error:` line and exits 75 (it never returns: HostGuard.coordinator_lost while
    the host guard runs; before it, from jax.distributed's start, watchdog.initialize_distributed's line);
  - yes -> the abort is something else (an XLA check failure, a fatal error reported by the service for
    another host): the previous SIGABRT action is put back and the signal raised again, so it ends as it
    would have (faulthandler's dump, exit 134).

Limits: a process that is killed (SIGKILL) or whose whole VM dies gives no notice, which is the case this is
for; a host 0 that is alive but frozen (SIGSTOP) still accepts connections, and its peers get the host
guard's heartbeat verdict after `heartbeat_timeout_s` instead. The handler needs the GIL: a thread that held
it for good inside native code would keep the handler (and the process) waiting (not seen in the runs of
tests/test_multihost*.py and experiments/multihost_faults.py, host 0 killed mid-run and in start-up). Where libc
cannot be reached through ctypes (not Linux or macOS) nothing is installed and JAX's abort stays.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import threading
from typing import Callable, Optional

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0    # a VM that is gone drops packets: no refusal, so give up after this long

_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int)
_SIGACTION_BYTES = 512     # glibc's struct sigaction is 152 bytes on x86_64 and aarch64: kept opaque


def parse_address(address: str) -> tuple:
  """"host:port", "[v6]:port" -> (host, port); ValueError for anything else."""
  host, _, port = str(address).rpartition(":")
  if not host or not port.isdigit():
    raise ValueError(f"not a HOST:PORT address: {address!r}")
  return host.strip("[]"), int(port)


def coordinator_gone(address: str, timeout: float = CONNECT_TIMEOUT_S) -> Optional[str]:
  """None when a TCP connection to the coordinator's `address` opens (something listens there), else why
  not ("connection refused", "no answer within 3 s", ...)."""
  host, port = parse_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout):
      return None
  except socket.timeout:
    return f"no answer within {timeout:g} s"
  except ConnectionRefusedError:
    return "connection refused"
  except OSError as e:
    return (e.strerror or type(e).__name__).lower()


class AbortWatch:
  """The SIGABRT handler of one run (see the module docstring). `on_lost(why)` must end the process."""

  def __init__(self, address: str, on_lost: Callable[[str], None]):
    parse_address(address)           # a bad address fails here, not inside the handler
    self.address = address
    self.on_lost = on_lost
    self.aborts = 0
    self._libc = None
    self._previous = None
    self._callback = _HANDLER_TYPE(self._on_abort)   # referenced for as long as it is installed

  def install(self) -> bool:
    """Replaces the SIGABRT action (keeping the previous one); False where that is not possible."""
    try:
      libc = ctypes.CDLL(None, use_errno=True)
      libc.signal.argtypes = [ctypes.c_int, _HANDLER_TYPE]
      libc.signal.restype = ctypes.c_void_p
      libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
      libc.pthread_kill.argtypes = [ctypes.c_ulong, ctypes.c_int]
      previous = ctypes.create_string_buffer(_SIGACTION_BYTES)
      if libc.sigaction(signal.SIGABRT, None, previous) != 0:
        return False
      if libc.signal(signal.SIGABRT, self._callback) == ctypes.c_void_p(-1).value:   # SIG_ERR (SIG_DFL is None)
        return False
    except (OSError, AttributeError, TypeError) as e:
      log.debug("no SIGABRT handler for a lost coordinator (%s); JAX's abort stays", e)
      return False
    self._libc, self._previous = libc, previous
    return True

  def uninstall(self) -> None:
    """Puts the previous SIGABRT action back (when this watch installed one)."""
    if self._libc is not None:
      self._libc.sigaction(signal.SIGABRT, self._previous, None)
      self._libc = None

  def _on_abort(self, signum: int) -> None:
    self.aborts += 1
    try:
      why = coordinator_gone(self.address)
      if why is not None:
        self.on_lost(why)                # prints the line, exits 75: does not return
        return
    except BaseException:  # noqa: BLE001 - never let Python unwind into the aborting native frame
      pass
    # Not ours: the previous action (faulthandler, or the default: exit 134), for this same signal. It is
    # blocked while this handler runs, so the raise below is delivered when the handler returns.
    libc = self._libc
    if libc is not None:
      libc.sigaction(signal.SIGABRT, self._previous, None)
      self._libc = None
      libc.pthread_kill(threading.get_ident(), signum)


# One handler per process: the start-up's (watchdog.initialize_distributed), then the host guard's.
_active: Optional[AbortWatch] = None


def watch(address: str, on_lost: Callable[[str], None]) -> bool:
  """Makes `on_lost` this process's answer to a lost coordinator, in place of the current one (if any);
  False where no handler can be installed (JAX's abort stays)."""
  global _active
  unwatch()
  candidate = AbortWatch(address, on_lost)
  if candidate.install():
    _active = candidate
  return _active is not None


def unwatch() -> None:
  """No handler any more: an abort is an abort again (the action before the first `watch`)."""
  global _active
  if _active is not None:
    _active.uninstall()
    _active = None
