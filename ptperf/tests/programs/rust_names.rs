// Rust names as perf prints them: a generic function, a method, std's
// closures and trait impls (legacy and v0 mangling, hashes dropped).
use std::collections::HashMap;
#[inline(never)]
fn count<T: std::hash::Hash + Eq + Clone>(v: &[T]) -> HashMap<T, usize> {
    let mut m = HashMap::new();
    for x in v { *m.entry(x.clone()).or_insert(0) += 1; }
    m
}
struct Pt { x: i32 }
impl Pt { #[inline(never)] fn norm(&self) -> i32 { self.x * self.x } }
fn main() {
    let v: Vec<u32> = (0..200).map(|i| i % 7).collect();
    let m = count(&v);
    let p = Pt { x: m.len() as i32 };
    std::process::exit(p.norm() & 1);
}
