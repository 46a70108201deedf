{
  # A hermetic toolchain for hubkernels: `nix develop` gives Python 3.11, a C++ compiler, ninja and (on
  # x86_64-linux) the CUDA 13.0 toolkit, then `./dev test` / `hubkernels build` run as usual. Torch itself
  # still comes from the official wheels (as kernel-builder does), pinned by ./dev.
  description = "hubkernels: build, publish and load custom kernels through the Hugging Face Hub";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f (import nixpkgs {
        inherit system;
        config = { allowUnfree = true; cudaSupport = system == "x86_64-linux"; };
      }));
    in {
      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = [ pkgs.python311 pkgs.gcc13 pkgs.ninja pkgs.git ]
            ++ pkgs.lib.optionals pkgs.stdenv.hostPlatform.isx86_64 [
              pkgs.cudaPackages_13.cuda_nvcc pkgs.cudaPackages_13.cuda_cudart pkgs.cudaPackages_13.cuda_cccl
            ];
          shellHook = ''
            export CC=${pkgs.gcc13}/bin/gcc CXX=${pkgs.gcc13}/bin/g++
          '' + pkgs.lib.optionalString pkgs.stdenv.hostPlatform.isx86_64 ''
            export CUDA_HOME=${pkgs.cudaPackages_13.cuda_nvcc}
          '';
        };
      });
    };
}
