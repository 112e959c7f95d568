package ptx

// The PTX files and their stamp are generated from the CUDA C sources by
// mkptx.sh, which needs nvcc; see README.md.
//go:generate sh mkptx.sh
