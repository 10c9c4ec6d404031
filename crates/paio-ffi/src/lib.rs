//! placeholder until the C ABI lands
