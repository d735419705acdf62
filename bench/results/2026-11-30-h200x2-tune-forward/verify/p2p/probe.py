import glob, os, site
import torch
print("torch=" + torch.__version__)
print("torch_nccl_version=" + ".".join(map(str, torch.cuda.nccl.version())))
loaded = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l})
print("torch_nccl_loaded=" + ",".join(loaded))
c = []
try:
    import nvidia.nccl
    c += [os.path.join(p, "lib", "libnccl.so.2") for p in nvidia.nccl.__path__]
except Exception as e:
    print("nvidia.nccl: " + repr(e))
for sp in site.getsitepackages():
    c += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libnccl.so.2")))
c = [p for p in c if os.path.isfile(p)]
print("wheel_nccl=" + (os.path.realpath(c[0]) if c else ""))
