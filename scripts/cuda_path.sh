# Sourced by the scripts: puts nvcc on PATH from the usual install locations when it is not
# there already, or stops with a clear message.
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-13*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi
command -v nvcc >/dev/null 2>&1 || { echo "error: the CUDA 13 toolkit (nvcc) was not found; install it first" >&2; exit 1; }
