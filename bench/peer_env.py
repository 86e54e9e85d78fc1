"""Thread and BLAS settings of cltrain's PyTorch peers (bench/pytorch_*.py),
imported BEFORE torch.

Debian's torch is built with BLAS_INFO=generic and runs its linear layers on
whatever libblas.so.3 the alternatives system points at: the netlib
reference BLAS unless an optimised one is installed (libopenblas0-pthread).
OpenBLAS ignores torch.set_num_threads and starts its own pool beside
torch's OpenMP threads (on 2 cores, 2 + 2 busy-waiting threads ran at a
third of the speed of either alone), so it gets the peer's thread count
here, before torch loads it, and idle OpenMP threads sleep.

  import peer_env; peer_env.threads_from_argv()   # then import torch
  peer_env.blas_info()                            # the library really loaded
"""
import os
import sys


def threads_from_argv(default="1", flag="--threads"):
    """Give OpenBLAS (and OpenMP) the count the command line asks for."""
    n = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == flag), default)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(n))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return n


def blas_info():
    """The BLAS libraries this process really runs on, read from its mapped
    libraries after a matrix product."""
    import torch
    torch.ones(64, 64) @ torch.ones(64, 64)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() or "mkl" in line.lower()}
    real = sorted({os.path.realpath(p) for p in libs if p.startswith("/")})
    core = openblas_core(real)
    return (",".join(real) or "unknown") + (" (OpenBLAS's %s kernels)" % core if core else "")


def openblas_core(libs):
    """The kernels a loaded OpenBLAS chose (OPENBLAS_CORETYPE chooses), as
    cltrain's log says of its own: the two sides must run the same ones."""
    import ctypes
    for p in libs:
        if "openblas" in p:
            try:
                f = ctypes.CDLL(p).openblas_get_corename
            except (OSError, AttributeError):
                continue
            f.restype = ctypes.c_char_p
            return f().decode()
    return None


def blas_optimised(info):
    """False for the netlib reference BLAS (Debian's /usr/lib/<triplet>/blas/)."""
    return any(x in info for x in ("openblas", "mkl", "blis", "atlas"))


def check_blas(info):
    """Refuse to time a peer on the reference BLAS unless PEER_ANY_BLAS=1."""
    if not blas_optimised(info) and os.environ.get("PEER_ANY_BLAS") != "1":
        sys.exit("peer: PyTorch runs on the reference BLAS (%s): its timings would not be a fair peer; install "
                 "libopenblas0-pthread (or set PEER_ANY_BLAS=1 to time it anyway)" % info)


# OpenBLAS's kernel families by the instructions they use, oldest first; a
# core not named here counts as the newest (never overridden).
CORE_RANK = {"prescott": 0, "core2": 0, "penryn": 0, "dunnington": 0, "atom": 0, "nehalem": 1, "sandybridge": 2,
             "haswell": 3, "zen": 3, "skylakex": 4, "cooperlake": 4, "sapphirerapids": 4}


def cpu_best_core():
    """The newest kernels of OpenBLAS 0.3.21 this CPU can run, from its flags."""
    with open("/proc/cpuinfo") as f:
        flags = set(next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), []))
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return "Sandybridge" if "avx" in flags else None


def fair_coretype():
    """What OPENBLAS_CORETYPE should be for both sides of a comparison: the
    CPU's best kernels where OpenBLAS picks older ones by itself (Debian's
    0.3.21 runs its SSE3 Prescott kernels on CPUs newer than it knows, such
    as Intel's family 6 model 207), else None. An OPENBLAS_CORETYPE already
    set is the user's choice and kept."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return None
    import glob
    libs = glob.glob("/usr/lib/*/openblas-pthread/libopenblas*.so*") + glob.glob("/usr/lib/*/libopenblas*.so*")
    chosen, best = openblas_core(libs), cpu_best_core()
    if not chosen or not best:
        return None
    return best if CORE_RANK.get(chosen.lower(), 99) < CORE_RANK[best.lower()] else None


if __name__ == "__main__" and sys.argv[1:] == ["--fair-coretype"]:
    print(fair_coretype() or "")
