//! Layer 2: what is said to the books and what they answer: commands,
//! ops, answers, and the traits a store implements to hold the records.

pub(crate) mod answer;
pub(crate) mod command;
pub(crate) mod op;
pub(crate) mod state;
