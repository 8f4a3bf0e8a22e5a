//! TCP network plugin (`libnccl-net-socket.so`).
