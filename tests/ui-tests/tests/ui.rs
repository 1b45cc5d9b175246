//! Compile-time tests of `#[derive(Idempotent)]`: each mistake a user can make is a case under
//! `ui/<category>/`, with the exact error it must produce in its `.stderr`; the cases under
//! `ui/pass/` must compile and run. Regenerate the `.stderr` files after a deliberate
//! message change with `TRYBUILD=overwrite cargo test -p idem-ui-tests --test ui`, then read them.

#[test]
fn ui() {
    // The cases build as a project of trybuild's own, in a target directory of its own, which
    // compiles every dependency again and does not inherit the workspace's profile: without
    // debug information, as the workspace's own test builds are, that build links and writes far
    // less. The errors the cases must produce do not depend on it.
    std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "false");
    let t = trybuild::TestCases::new();
    // The input is not a struct with named fields.
    t.compile_fail("ui/structure/*.rs");
    // Roles (`key`, `timestamp`, `frozen`, `volatile`) that are missing, repeated or conflicting.
    t.compile_fail("ui/roles/*.rs");
    // `#[idem(…)]` attributes that are unknown, repeated, misplaced or badly valued.
    t.compile_fail("ui/attributes/*.rs");
    // Fields whose types cannot play their role, and documents or stores a method cannot take.
    t.compile_fail("ui/types/*.rs");
    // Fields stored under a name idem writes itself.
    t.compile_fail("ui/names/*.rs");
    // Mistakes of each kind again, in code that calls the generated methods: the derive's error
    // is the only one, said once, with nothing from the calls or the generated code after it.
    t.compile_fail("ui/with_calls/*.rs");
    t.pass("ui/pass/*.rs");
}

/// Each case under `ui/with_calls/` is one mistake, and must stay one error: a `.stderr`
/// regenerated with a cascade after it would still match its case, so the count is checked here.
#[test]
fn a_mistake_is_one_error_in_code_that_uses_the_type() {
    let mut cases = 0;
    for entry in std::fs::read_dir("ui/with_calls").unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|extension| extension == "stderr")
        {
            let stderr = std::fs::read_to_string(&path).unwrap();
            let errors = stderr
                .lines()
                .filter(|line| line.starts_with("error"))
                .count();
            assert_eq!(errors, 1, "{}:\n{stderr}", path.display());
            cases += 1;
        }
    }
    assert!(cases > 0, "no case under ui/with_calls/");
}
