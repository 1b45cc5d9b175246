//! Small suites gathered in one test binary, each a module.

mod mariadb_layout;
