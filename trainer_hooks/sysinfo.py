"""Facts gathered once per session: host, versions, GPUs, the model, the dataset.

Everything here runs at session start (or at a checkpoint), never per step. torch is
used only when the training process already has it loaded.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

# Environment variables that change how a distributed run behaves: worth keeping with the logs.
_ENV_PREFIXES = ("CUDA_VISIBLE_DEVICES", "NCCL_", "OMP_NUM_THREADS", "ACCELERATE_", "TORCH_DISTRIBUTED_DEBUG",
                 "TORCH_NCCL_", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTORCH_CUDA_ALLOC_CONF")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "accelerate", "transformers", "peft", "bitsandbytes", "trl", "logkit"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    torch = sys.modules.get("torch")
    out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    out["nccl"] = None
    try:
        if torch is not None and torch.cuda.is_available():
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
    return out


def gpu_list() -> list[dict]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": props.name, "uuid": str(getattr(props, "uuid", "")),
                     "memory_total_mb": round(props.total_memory / 1e6, 1),
                     "compute_capability": f"{props.major}.{props.minor}",
                     "multiprocessors": props.multi_processor_count})
    _nvml_links(gpus)
    return gpus


def _nvml_links(gpus: list[dict]) -> None:
    """Each GPU's link facts from NVML, where it answers: PCIe generation and width in use (``pcie_gen``,
    ``pcie_width``) and active NVLinks (``nvlinks``), matched to torch's devices by UUID. What decides how the
    GPUs of a host talk (NVLink, PCIe peer-to-peer); never fails the run."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return
    try:
        by_uuid = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            by_uuid[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = h
        for g in gpus:
            h = next((v for k, v in by_uuid.items() if g["uuid"] and g["uuid"].replace("GPU-", "") in k), None)
            if h is None:
                continue
            try:
                g["pcie_gen"] = int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h))
                g["pcie_width"] = int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(h))
            except Exception:
                pass
            active, answered = 0, False
            for link in range(18):  # NVML_NVLINK_MAX_LINKS
                try:
                    active += int(pynvml.nvmlDeviceGetNvLinkState(h, link) == 1)
                    answered = True
                except Exception:
                    break  # past the GPU's last link; at link 0: NVML cannot tell (a VM: NotSupported)
            if answered:  # a count NVML could not give is unknown, never 0
                g["nvlinks"] = active
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def system_info(log_dir: Path | None = None) -> dict:
    """Host facts for the ``system_info`` record."""
    info: dict = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python_executable": os.path.basename(sys.executable),
        "cpu_count": os.cpu_count(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)},
    }
    try:
        import psutil

        vm = psutil.virtual_memory()
        info["memory_total_gb"] = round(vm.total / 1e9, 3)
        info["memory_available_gb"] = round(vm.available / 1e9, 3)
        info["cpu_count_physical"] = psutil.cpu_count(logical=False)
    except Exception:
        info["memory_total_gb"] = None
    info["network"] = network_facts()
    if log_dir is not None:
        try:
            usage = shutil.disk_usage(log_dir)
            info["log_disk_free_gb"] = round(usage.free / 1e9, 3)
        except OSError:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        info["cuda_available"] = bool(torch.cuda.is_available())
    return info


def network_facts() -> dict:
    """What decides the network between hosts: each interface that is up with its speed in Mb/s (0 where
    the driver gives none: a virtual NIC), and the InfiniBand/RoCE devices (``/sys/class/infiniband``;
    an empty list: none, so NCCL falls back to TCP sockets; absent where the platform has no such folder)."""
    out: dict = {}
    try:
        import psutil

        out["interfaces"] = {name: int(st.speed) for name, st in psutil.net_if_stats().items()
                             if st.isup and "loopback" not in str(getattr(st, "flags", "")) and name != "lo"}
    except Exception:
        pass
    if sys.platform.startswith("linux"):
        try:
            out["infiniband"] = sorted(os.listdir("/sys/class/infiniband"))
        except FileNotFoundError:
            out["infiniband"] = []
        except OSError:
            pass
    return out


def model_gpu_count(model) -> int:
    if model is None:
        return 1
    try:
        return len({p.device.index for p in model.parameters() if p.device.type == "cuda"}) or 1
    except Exception:
        return 1


def model_name(model) -> str | None:
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", None) or getattr(config, "name_or_path", None)
    return str(name) if name else type(model).__name__


def _param_count(p) -> int:
    # bitsandbytes packs two 4-bit values per uint8 element; count the weights it stands for.
    quant_state = getattr(p, "quant_state", None)
    if quant_state is not None and getattr(quant_state, "shape", None) is not None:
        n = 1
        for d in quant_state.shape:
            n *= int(d)
        return n
    return p.numel()


def model_info(model) -> dict:
    """Parameter counts (total, trainable), memory size, dtypes and quantization of ``model``."""
    total = trainable = size = trainable_bytes = quantized = 0
    dtypes: Counter = Counter()
    for p in model.parameters():
        n = _param_count(p)
        total += n
        size += p.numel() * p.element_size()
        dtypes[str(p.dtype).replace("torch.", "")] += n
        if getattr(p, "quant_state", None) is not None:
            quantized += n
        if p.requires_grad:
            trainable += n
            trainable_bytes += p.numel() * p.element_size()
    quant = None
    qc = getattr(getattr(model, "config", None), "quantization_config", None)
    if qc is not None:
        raw = qc.to_dict() if hasattr(qc, "to_dict") else dict(qc)
        quant = {k: v for k, v in raw.items() if isinstance(v, (str, int, float, bool, type(None)))}
    return {
        "model_class": type(model).__name__,
        "model_name": model_name(model),
        "parameters_total": total,
        "parameters_trainable": trainable,
        "parameters_quantized": quantized,
        "trainable_percent": round(100.0 * trainable / total, 4) if total else None,
        "trainable_grad_bytes": trainable_bytes,
        "size_bytes_estimate": size,
        "size_mb_fp32_equivalent": round(total * 4 / 1e6, 3),
        "dtypes": dict(dtypes),
        "quantization": quant,
    }


def _shape(value):
    shape = getattr(value, "shape", None)
    if shape is not None:
        return list(shape)
    if isinstance(value, (list, tuple)):
        return [len(value)]
    return None


def dataset_info(dataset=None, dataloader=None) -> dict:
    """Size and sample shape of the training data (first sample only)."""
    info: dict = {}
    if dataset is None and dataloader is not None:
        dataset = getattr(dataloader, "dataset", None)
    if dataset is not None:
        info["dataset_class"] = type(dataset).__name__
        try:
            info["num_samples"] = len(dataset)
        except TypeError:
            info["num_samples"] = None
        try:
            sample = dataset[0]
            if isinstance(sample, dict):
                info["sample_keys"] = sorted(sample)
                info["sample_shapes"] = {k: _shape(v) for k, v in sample.items()}
            else:
                info["sample_shape"] = _shape(sample)
        except Exception:
            pass
        features = getattr(dataset, "features", None)
        if features is not None:
            info["features"] = {k: str(v) for k, v in dict(features).items()}
    if dataloader is not None:
        for attr in ("batch_size", "num_workers", "drop_last"):
            value = getattr(dataloader, attr, None)
            if isinstance(value, (int, bool)):
                info[attr] = value
        try:
            info["batches_per_epoch"] = len(dataloader)
        except TypeError:
            pass
    return info


def folder_size(path: Path) -> int | None:
    try:
        return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    except OSError:
        return None
