cd /work/main
for r in 1 2 3; do
 for b in 1 0; do
  XB_BCAST=$b .venv/bin/python -m bench matrix --launcher netns --link 5gbit --topologies 1x1,2x1 --models resnet18 --batch-sizes 16 --comm-hooks none --results /tmp/i29/exp1-b$b.jsonl -- --steps 20 --warmup-steps 10 --image-size 32 --log-every 0
 done
done
echo EXP1DONE
