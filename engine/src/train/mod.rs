//! What is built from tensors for training: modules and losses (`nn/`), the optimizers, the
//! `DataLoader`, mixed precision (`amp.rs`) and `DataParallel`.

pub mod amp;
pub mod data;
pub mod nn;
pub mod optim;
pub mod parallel;
