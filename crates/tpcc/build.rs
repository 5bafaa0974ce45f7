//! Records the git commit the binary is built from (`KEEL_GIT_COMMIT`, with `-dirty` when the
//! tree had uncommitted changes), for the run metadata. Outside a git checkout nothing is set and
//! the metadata says `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!(
        "cargo:rustc-env=KEEL_GIT_COMMIT={commit}{}",
        if dirty { "-dirty" } else { "" }
    );
    // Rebuild the stamp when HEAD moves (commit, checkout) or the index changes.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "logs/HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
    }
}
