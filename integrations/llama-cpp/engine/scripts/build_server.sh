#!/usr/bin/env bash
# Builds llama.cpp's own server (CPU) for the side-by-side figures
# (server_figures.sh): the llama.cpp that the PyPI source distribution of
# llama-cpp-python 0.3.36 vendors, with native kernels (AVX2 / AVX-512) but
# without the AMX ones, which crash on this package's model (Q4_1) in that
# version, as they do in the llama.cpp llama-cpp-sys-2 vendors (see
# ../.cargo/config.toml). Not run in CI.
#
# usage: build_server.sh DIR   (DIR/bin/llama-server afterwards; about 8
#        minutes to download and 15 to build on 2 cores)
set -euo pipefail
dir=${1:?usage: build_server.sh DIR}
mkdir -p "$dir"
cd "$dir"
command -v cmake >/dev/null || { echo "build_server.sh: needs cmake (apt-get install cmake)" >&2; exit 1; }
if [ ! -d src ]; then
    # pip prepares the sdist's metadata before it saves it: most of the download time.
    pip download --no-deps --no-binary :all: -d sdist llama-cpp-python==0.3.36
    tar xzf sdist/llama_cpp_python-0.3.36.tar.gz
    mv llama_cpp_python-0.3.36/vendor/llama.cpp src
    rm -rf llama_cpp_python-0.3.36
fi
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CFLAGS="$no_amx" CXXFLAGS="$no_amx" cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_OPENSSL=OFF > cmake.log
cmake --build build -j"$(nproc)" --target llama-server > build.log
mkdir -p bin
cp build/bin/llama-server bin/
cp build/bin/*.so* bin/ 2>/dev/null || true
echo "$dir/bin/llama-server"
