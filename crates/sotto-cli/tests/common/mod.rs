//! What the binary's end-to-end tests share: the sample clip and how its text is compared.

pub use sotto_testdata::{jfk, normalise, JFK};
