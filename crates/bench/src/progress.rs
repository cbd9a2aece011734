//! What the benchmark is doing, on stderr.

pub fn step(message: impl AsRef<str>) {
    eprintln!("[bench] {}", message.as_ref());
}
