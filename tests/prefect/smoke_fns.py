def double(x):
    print(f"doubling {x}")
    return 2 * x
