"""The local Hub's HTTP endpoints beside Xet's: repositories (`repos`), files and commits (`files`), the package
index over the repos' wheels (`simple`) and the test-mode control routes (`control`)."""
