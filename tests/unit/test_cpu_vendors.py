"""Intel and AMD CPUs compute every operation of a pinned deep fit alike, with AVX2 and with
AVX-512 (shdh.runtime.instruction_set).

Without the vendor held too, MKL took other kernels on Intel than on AMD for small matrix
products and for exp and log, and the same pipeline printed other SHDH rows on an Intel Xeon.
The digests of tests/unit/pinned_ops.py are compared here with two real machines' recordings
and, on any machine, with two emulated CPUs: QEMU's user mode runs this machine's Python
instruction by instruction as an Intel Haswell (GenuineIntel, AVX2) and as an AMD EPYC-Rome
(AuthenticAMD, AVX2), cpuid included, so MKL and oneDNN choose their kernels as on those CPUs.
Under the pin that held only the instruction set, the emulated Haswell gave the Intel Xeon's
digests and the emulated EPYC-Rome the AMD EPYC's, operation for operation: the emulation parts
where the real CPUs part.

The suite emulates the vendor this machine is not: its own vendor it computes for real (the
first test), and an emulated run costs half a minute, most of it QEMU importing torch.
"""

from __future__ import annotations

import shutil

import pytest

from tests.unit.test_instruction_set import assert_as_recorded, run_digests, unpinned_env

# tests/unit/pinned_ops.py under the pin, on each vendor's CPU: equal, as they must be.
_OPS = {
    "batchnorm_train": "e735d814a29c347e",
    "code_gram": "b5341db3893f3cc6",
    "conv3x3_bias": "5d725ae0da7bf36a",
    "conv3x3_c64": "e0343cf1cfb27c93",
    "conv5x5_c3": "346235aa8e854ee2",
    "conv5x5_c8": "9d2d1d9179350057",
    "exp_log": "c95cab74333587c0",
    "linear_4096": "2de38f0ffae9d462",
    "linear_512": "e183a4435e49f7a3",
    "linear_head": "35109b9f30b5ccbe",
    "log1p_exp": "dc0987cc48bec63e",
    "maxpool2": "f0f6c0ab7fe0dde4",
    "mean_sq": "fbc4f5f04d360f0d",
    "relu": "d6105ae64dcd6520",
    "sgd_momentum": "43d96dc6d1a9a343",
    "sigmoid": "ef9a85ea89e55316",
    "softplus": "91c9cad9e7c48ace",
    "sum": "cfd3ff4fa546efaf",
    "tanh": "efbd5132e790bb5e",
}
PINNED_OPS = {
    "AMD EPYC (family 25, AVX-512, 2 cores), 2026-11-28": dict(_OPS),
    # the CPU probe under this pin on that machine (../shared/cpu-probe)
    "Intel Xeon @ 2.50GHz (AVX-512, 2 cores), 2026-11-28": dict(_OPS),
}
# QEMU's CPU models by vendor: AVX2 only (QEMU does not emulate AVX-512).
EMULATED = {"GenuineIntel": "Haswell", "AuthenticAMD": "EPYC-Rome"}
QEMU = "qemu-x86_64"


def host_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This CPU's cpuid vendor string (GenuineIntel, AuthenticAMD, ...); unknown where
    /proc/cpuinfo cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            return next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")),
                "unknown",
            )
    except OSError:
        return "unknown"


def other_vendors(vendor: str) -> list[str]:
    """The QEMU models of every vendor but `vendor` (both, on a CPU of neither)."""
    return [model for name, model in EMULATED.items() if name != vendor]


# Left out under emulation: QEMU takes a minute over this one product (the real CPUs' recordings
# cover it), and make test must stay short. The products of linear_512 and linear_head still take
# MKL's matrix kernels there.
NOT_EMULATED = ("linear_4096",)


def pinned_ops(*prefix: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return run_digests("tests.unit.pinned_ops", unpinned_env(), *prefix, args=skip)


def test_this_cpu_computes_each_operation_as_both_vendors_did() -> None:
    assert_as_recorded(pinned_ops(), PINNED_OPS)


def test_the_vendor_of_this_cpu_is_read_and_only_the_others_are_emulated(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: avx2\n")
    assert host_vendor(str(cpuinfo)) == "GenuineIntel"
    assert host_vendor(str(tmp_path / "absent")) == "unknown"
    assert other_vendors("GenuineIntel") == ["EPYC-Rome"]
    assert other_vendors("AuthenticAMD") == ["Haswell"]
    assert other_vendors("HygonGenuine") == ["Haswell", "EPYC-Rome"]


@pytest.mark.slow
@pytest.mark.parametrize("model", other_vendors(host_vendor()))
def test_an_emulated_cpu_of_either_vendor_computes_them_alike(model: str) -> None:
    qemu = shutil.which(QEMU)
    if qemu is None:  # make test installs it; a bare pytest run says what is missing
        pytest.fail(
            f"{QEMU} not found: install Debian's qemu-user (`apt-get install qemu-user`, as "
            "`make test` does) to emulate an Intel and an AMD CPU"
        )
    # The emulator's warnings about host features it cannot model go to stderr, not the JSON.
    seen = pinned_ops(qemu, "-cpu", model, skip=NOT_EMULATED)
    expected = {op: digest for op, digest in _OPS.items() if op not in NOT_EMULATED}
    assert_as_recorded(seen, {f"real CPUs' recordings, emulated as {model}": expected})
