//! The program's build script: the DOCA SDK's rpath on the binary (a library's link arguments do
//! not reach the final binary, so the library's build script cannot add it).

fn main() {
    println!("cargo:rerun-if-changed=build-bin.rs");
    if let Ok(rpath) = std::env::var("DEP_DOCA_RPATH") {
        for dir in rpath.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
