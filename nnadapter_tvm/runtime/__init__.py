"""The runtime's internals behind the API: conversion to Relax, device partitioning, the cache,
run-time checks, model tokens."""
