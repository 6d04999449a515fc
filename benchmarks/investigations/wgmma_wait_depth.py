"""Does a narrow wgmma tile's consumer gain from two wgmma groups in flight? The shape rules'
kernel and the swapped 64-row split-K-1 kernel at small M, each rendered as it is ("base") and
with the consumer waiting for the group two back (``wgmma_wait<2>``) and releasing the stage two
back ("wait2"), timed graph-captured beside F.linear (40 launches over 8 input sets, median of
9 replays, two rounds in alternating order), outputs checked against float64.

    python3 benchmarks/investigations/wgmma_wait_depth.py compile    # CPU: .v1/exp/*.cubin
    python3 benchmarks/investigations/wgmma_wait_depth.py run        # GPU: $OUT/wait2.json
"""
import sys, os, json
sys.path.insert(0, 'benchmarks/investigations')
from pathlib import Path
import small_m as S
SHAPES = [(64, 4096, 4096), (64, 2048, 2048), (32, 4096, 4096), (64, 14336, 4096),
          (128, 576, 7168), (16, 4096, 4096), (64, 3072, 3072)]
OLD = '''                wgmma_wait<1>();            // the previous stage's wgmma has finished \
reading
                if (kt > 0) release(prev);
                prev = s;'''
NEW = '''                wgmma_wait<2>();            // the stage two back has finished reading
                if (kt > 1) release(prev2);
                prev2 = prev;
                prev = s;'''
def configs():
    out = {}
    for m, n, k in SHAPES:
        c = S.candidates(m, n, k)
        for lab in ('rules', [l for l in c if l.endswith('sk1') and l.startswith('swap 64x')][0]):
            out[(m, n, k, lab)] = c[lab]
    return out
def variant(src):
    assert OLD in src
    src = src.replace(OLD, NEW).replace('            int prev = 0;\n',
                                        '            int prev = 0, prev2 = 0;\n')
    a = '            if (nk > 0) release(prev);\n'
    assert a in src
    return src.replace(a, '            if (nk > 1) release(prev2);\n' + a)
if sys.argv[1] == 'compile':
    from gemmgen.codegen.render import render
    from gemmgen.compile.cache import compile_cached
    os.makedirs('.v1/exp', exist_ok=True)
    for key, (cfg, swap) in configs().items():
        r = render(cfg, 'sm_90a')
        for tag, src in (('base', r), ('wait2', variant(r))):
            cub, res = compile_cached(src, 'sm_90a', cfg.name)
            Path(f'.v1/exp/{cfg.name}.{tag}.cubin').write_bytes(cub)
            print(tag, cfg.name, res.registers, res.spill_stores)
else:
    import torch, torch.nn.functional as F
    from gemmgen.runtime.build import adopt_pycuda, from_cubin
    import graph_timing
    adopt_pycuda()
    side = torch.cuda.Stream()

    def gms(launch, reps=40):
        return graph_timing.graph_ms(launch, reps, 9, stream=side) * 1e3  # us

    dt = torch.bfloat16; rows = []
    for (m, n, k, lab), (cfg, swap) in configs().items():
        sets = 8
        xs = [torch.randn(m, k, device='cuda', dtype=dt) for _ in range(sets)]
        ws = [torch.randn(n, k, device='cuda', dtype=dt) * k ** -0.5 for _ in range(sets)]
        ys = [torch.empty(m, n, device='cuda', dtype=dt) for _ in range(sets)]
        ref = xs[0].double() @ ws[0].double().t()
        row = {'M': m, 'N': n, 'K': k, 'label': lab, 'config': cfg.name,
               'torch_us': gms(lambda i: F.linear(xs[i % sets], ws[i % sets]))}
        for rnd in range(2):
            for tag in (('base', 'wait2') if rnd == 0 else ('wait2', 'base')):
                cubin = Path(f'.v1/exp/{cfg.name}.{tag}.cubin').read_bytes()
                kern = from_cubin(cfg, 'sm_90a', cubin)
                def launch(i, kern=kern):
                    x, w, y = xs[i % sets], ws[i % sets], ys[i % sets]
                    s = torch.cuda.current_stream().cuda_stream
                    kern(w, x.t(), y.t(), stream=s) if swap else kern(x, w.t(), y, stream=s)
                ys[0].fill_(float('nan')); launch(0); torch.cuda.synchronize()
                err = ((ys[0].double() - ref).norm() / ref.norm()).item()
                row.setdefault(tag + '_us', []).append(gms(launch)); row[tag + '_err'] = err
        print(json.dumps(row), flush=True); rows.append(row)
    Path(os.environ['OUT'], 'wait2.json').write_text(json.dumps(rows, indent=1))
