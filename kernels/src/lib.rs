//! Reduction and copy primitives for every `ncclDataType_t` × `ncclRedOp_t`.
