//! InfiniBand/RoCE verbs network plugin (`libnccl-net-ib.so`).
