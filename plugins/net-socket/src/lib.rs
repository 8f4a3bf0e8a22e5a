//! TCP network plugin (`libnccl-net-socket.so`).
pub mod proto;
